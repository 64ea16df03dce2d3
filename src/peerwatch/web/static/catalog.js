// peerwatch catalogue page: sort any table by a column (click its header, again to reverse) and filter
// the families table by text and signal. Plain DOM, no dependencies; without JavaScript the tables stay.
"use strict";

function cellValue(row, col) {
  const text = row.cells[col] ? row.cells[col].textContent.trim() : "";
  const n = Number(text.replace(/,/g, ""));
  return text !== "" && Number.isFinite(n) ? n : text.toLowerCase();
}

function sortBy(table, col, th) {
  const body = table.tBodies[0];
  const descending = th.dataset.sort === "asc";
  table.querySelectorAll("th").forEach((h) => {
    delete h.dataset.sort;
    h.removeAttribute("aria-sort");
  });
  th.dataset.sort = descending ? "desc" : "asc";
  th.setAttribute("aria-sort", descending ? "descending" : "ascending");
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = cellValue(a, col);
    const y = cellValue(b, col);
    const order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : typeof x === "number" ? -1 : 1;
    return descending ? -order : order;
  });
  body.append(...rows);
}

function sortable(table) {
  Array.from(table.tHead.rows[0].cells).forEach((th, col) => {
    th.classList.add("sortable");
    th.title = "sort by " + th.textContent;
    th.addEventListener("click", () => sortBy(table, col, th));
  });
}

function filterable(table) {
  const bar = document.createElement("p");
  bar.className = "filter";
  bar.innerHTML =
    '<label>filter <input type="search" name="q" placeholder="name, exporter, category, unit…" size="36"></label> ' +
    '<label><input type="checkbox" name="active"> carrying signal only</label> <span class="count" role="status"></span>';
  table.before(bar);
  const q = bar.querySelector("input[name=q]");
  const active = bar.querySelector("input[name=active]");
  const count = bar.querySelector(".count");
  const signal = Array.from(table.tHead.rows[0].cells).findIndex((th) => th.textContent === "signal");
  const apply = () => {
    const words = q.value.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    for (const row of table.tBodies[0].rows) {
      const text = row.textContent.toLowerCase();
      const ok =
        words.every((w) => text.includes(w)) && (!active.checked || row.cells[signal].textContent === "active");
      row.hidden = !ok;
      shown += ok ? 1 : 0;
    }
    count.textContent = `${shown} of ${table.tBodies[0].rows.length} families`;
  };
  q.addEventListener("input", apply);
  active.addEventListener("change", apply);
  apply();
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("main table").forEach(sortable);
  const families = document.querySelector("table.families");
  if (families) filterable(families);
});
