// peerwatch dashboard: load plot fragments into their boxes, and acknowledge an alarm.
// No dependencies. The API token is typed by the user, sent only as an Authorization header,
// and never stored.
"use strict";

async function loadPlot(box) {
  try {
    const resp = await fetch(box.dataset.src, { headers: { Accept: "text/html" } });
    // The fragment is SVG built by the server from escaped values.
    box.innerHTML = resp.ok ? await resp.text() : `<p class="muted">plot unavailable (${resp.status})</p>`;
  } catch (err) {
    box.textContent = "plot unavailable: " + err;
  }
  box.classList.add("loaded");
}

function loadPlots() {
  const boxes = Array.from(document.querySelectorAll(".plot[data-src]"));
  // A few at a time: each one makes the server read a family's judged frames.
  let next = 0;
  const worker = async () => {
    while (next < boxes.length) await loadPlot(boxes[next++]);
  };
  return Promise.all([worker(), worker()]);
}

async function acknowledge(event) {
  event.preventDefault();
  const form = event.target;
  const out = form.querySelector(".result");
  const token = form.elements.token.value.trim();
  out.textContent = "sending…";
  try {
    const resp = await fetch(form.dataset.url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + token },
      body: JSON.stringify({ by: form.elements.by.value || "dashboard", note: form.elements.note.value }),
    });
    const body = await resp.json();
    if (!resp.ok) {
      out.textContent = `refused (${resp.status}): ${body.error || resp.statusText}`;
      out.className = "result error";
      return;
    }
    out.textContent = `acknowledged by ${body.acknowledged.by}`;
    out.className = "result ok";
    const status = document.getElementById("alarm-status");
    if (status) {
      status.innerHTML = "";
      const badge = document.createElement("span");
      badge.className = "badge " + body.status;
      badge.textContent = body.status;
      status.appendChild(badge);
    }
    form.elements.token.value = "";
  } catch (err) {
    out.textContent = "failed: " + err;
    out.className = "result error";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("ack");
  if (form) form.addEventListener("submit", acknowledge);
  loadPlots();
});
