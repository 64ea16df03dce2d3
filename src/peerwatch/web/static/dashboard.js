// peerwatch dashboard: draw each plot from its JSON with uPlot (vendored, static/VENDORED.md), keep the
// page current as the service evaluates new steps, and acknowledge an alarm. Nothing leaves the server.
// The API token is typed by the user, sent only as an Authorization header, and never stored.
"use strict";

const PLOT_HEIGHT = 280;
const BAND_MIN_PX = 6; // a flat peer band (all peers alike) is still drawn this thick
const COLOURS = { band: "rgba(120,160,220,0.40)", edge: "rgba(58,98,168,0.55)", median: "#3a62a8", value: "#111" };

const pad2 = (n) => String(n).padStart(2, "0");

// Data time is UTC everywhere on the dashboard.
function utcDate(ts) {
  const d = new Date(ts * 1000);
  return `${d.getUTCFullYear()}-${pad2(d.getUTCMonth() + 1)}-${pad2(d.getUTCDate())}`;
}

function utcClock(ts, seconds) {
  const d = new Date(ts * 1000);
  const hm = `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}`;
  return seconds ? `${hm}:${pad2(d.getUTCSeconds())}` : hm;
}

const utcFull = (ts) => (ts == null ? "–" : `${utcDate(ts)} ${utcClock(ts, true)}Z`);

// Four significant digits, SI prefixes from ten thousand on (a rate of 12,345,678 B/s reads 12.35M).
function number(v) {
  if (v == null || !Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  for (const [size, prefix] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e4, "k"]]) {
    if (a >= size) return +(v / size).toPrecision(4) + prefix;
  }
  return String(+v.toPrecision(4));
}

// Time ticks: hours and minutes, with the date on the first tick and where the day changes.
function timeTicks(box, splits) {
  const step = splits.length > 1 ? splits[1] - splits[0] : 60;
  const labels = splits.map((s, i) => {
    const clock = utcClock(s, step < 60);
    return i === 0 || utcDate(s) !== utcDate(splits[i - 1]) ? `${utcDate(s)}\n${clock}` : clock;
  });
  box.dataset.xTicks = labels.join("|"); // what was drawn, for tests and screen readers
  return labels;
}

function finite(arrays) {
  const out = [];
  for (const a of arrays) for (const v of a) if (v != null && Number.isFinite(v)) out.push(v);
  return out;
}

// The y range over everything drawn, padded; a flat series gets room around it instead of no range.
function yRange(d) {
  const all = finite([d.value, d.median, d.low, d.high]);
  if (!all.length) return [0, 1];
  let lo = Math.min(...all);
  let hi = Math.max(...all);
  const span = hi - lo;
  const pad = span > 1e-9 * Math.max(1, Math.abs(hi)) ? span * 0.08 : Math.abs(hi) * 0.1 || 1;
  return [lo - pad, hi + pad];
}

// The band as drawn: at least BAND_MIN_PX tall around its middle, so peers that all agree still show.
function displayBand(d, range, plotPx) {
  const half = ((range[1] - range[0]) * BAND_MIN_PX) / Math.max(plotPx, 1) / 2;
  const low = [];
  const high = [];
  d.low.forEach((l, i) => {
    const h = d.high[i];
    if (l == null || h == null) {
      low.push(null);
      high.push(null);
      return;
    }
    const mid = (l + h) / 2;
    low.push(Math.min(l, mid - half));
    high.push(Math.max(h, mid + half));
  });
  return { low, high };
}

function plotData(box) {
  const d = box.plotJson;
  box.plotRange = yRange(d);
  // the plot area's height: measured once drawn, estimated before (the axes take the rest)
  const band = displayBand(d, box.plotRange, box.plotPx || PLOT_HEIGHT - 100);
  return [d.timestamps, band.low, band.high, d.median, d.value];
}

const plotWidth = (box) => Math.max(360, Math.min(box.clientWidth - 10 || 900, 1100));

function plotOptions(box, d) {
  const unit = d.unit || "";
  const shown = (key) => (u, _v, _s, i) => (i == null ? "–" : `${number(box.plotJson[key][i])} ${unit}`.trim());
  const edge = { stroke: COLOURS.edge, width: 1, points: { show: false } };
  return {
    width: plotWidth(box),
    height: PLOT_HEIGHT,
    scales: { x: { time: true }, y: { range: () => box.plotRange } },
    series: [
      { label: "time (UTC)", value: (u, ts) => utcFull(ts) },
      { label: "peers p10", ...edge, value: shown("low") },
      { label: "peers p90", ...edge, value: shown("high") },
      { label: "peers' median", stroke: COLOURS.median, width: 1.5, dash: [6, 4], points: { show: false }, value: shown("median") },
      { label: d.node, stroke: COLOURS.value, width: 2, value: shown("value") },
    ],
    bands: [{ series: [2, 1], fill: COLOURS.band }],
    axes: [
      { label: "time (UTC)", values: (u, splits) => timeTicks(box, splits), size: 50 },
      {
        label: unit === "/s" ? "per second" : unit || "value",
        size: 70,
        values: (u, splits) => {
          const labels = splits.map(number);
          box.dataset.yTicks = labels.join("|");
          return labels;
        },
      },
    ],
    legend: { live: true },
    hooks: { draw: [(u) => drawMarks(box, u)] },
  };
}

// Vertical lines at the marks (an alarm's opening); also records how tall the band was drawn.
function drawMarks(box, u) {
  const ctx = u.ctx;
  const { left, top, width, height } = u.bbox;
  ctx.save();
  ctx.strokeStyle = "#c8362d";
  ctx.fillStyle = "#c8362d";
  ctx.lineWidth = 1.5 * devicePixelRatio;
  ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
  let drawn = 0;
  for (const m of box.plotJson.marks || []) {
    const x = u.valToPos(m.ts, "x", true);
    if (x < left || x > left + width) continue;
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, top + height);
    ctx.stroke();
    ctx.fillText(m.label, x + 4 * devicePixelRatio, top + 12 * devicePixelRatio);
    drawn++;
  }
  ctx.restore();
  box.dataset.marks = String(drawn);
  const [, low, high] = u.data;
  let thinnest = Infinity;
  low.forEach((l, i) => {
    if (l != null && high[i] != null) thinnest = Math.min(thinnest, u.valToPos(l, "y") - u.valToPos(high[i], "y"));
  });
  box.dataset.bandPx = Number.isFinite(thinnest) ? thinnest.toFixed(1) : "";
  // The band's least thickness is in pixels of the plot area, known only once laid out: redo it then.
  const px = u.bbox.height / devicePixelRatio;
  if (Math.abs(px - (box.plotPx || 0)) > 0.5) {
    box.plotPx = px;
    queueMicrotask(() => u.setData(plotData(box)));
  }
}

async function fetchPlot(box) {
  const resp = await fetch(box.dataset.src, { headers: { Accept: "application/json" } });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body.error || `${resp.status} ${resp.statusText}`);
  return body;
}

async function loadPlot(box) {
  try {
    box.plotJson = await fetchPlot(box);
    box.textContent = "";
    box.uplot = new uPlot(plotOptions(box, box.plotJson), plotData(box), box);
  } catch (err) {
    box.innerHTML = "";
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = "no plot: " + err.message;
    box.appendChild(p);
  }
  box.classList.add("loaded");
}

// A few at a time: each one makes the server read a family's judged frames.
function eachPlot(work) {
  const boxes = Array.from(document.querySelectorAll(".plot[data-src]"));
  let next = 0;
  const worker = async () => {
    while (next < boxes.length) await work(boxes[next++]);
  };
  return Promise.all([worker(), worker()]);
}

// New data for a drawn plot: only its data changes, the chart stays.
async function refreshPlot(box) {
  if (!box.uplot) return loadPlot(box);
  try {
    box.plotJson = await fetchPlot(box);
    box.uplot.setData(plotData(box));
  } catch (err) {
    /* keep what is drawn; the next step tries again */
  }
}

// Poll the service's status each step; when it has evaluated a newer step, reload the page or its plots.
async function watch() {
  const mode = document.body.dataset.refresh;
  if (!mode) return;
  const status = async () => (await fetch("/healthz")).json();
  let seen;
  try {
    seen = (await status()).evaluated_until;
  } catch (err) {
    return;
  }
  document.body.dataset.seen = String(seen); // watching from this step on
  setInterval(async () => {
    try {
      const s = await status();
      if (s.evaluated_until === seen) return;
      seen = s.evaluated_until;
      if (mode === "page") {
        location.reload();
        return;
      }
      const badge = document.querySelector("header .status .badge");
      if (badge) {
        badge.className = "badge " + s.status;
        badge.textContent = `${s.status} · data until ${utcFull(s.evaluated_until)}`;
      }
      eachPlot(refreshPlot);
    } catch (err) {
      /* the service is restarting: try again next step */
    }
  }, 1000 * Number(document.body.dataset.every || 30));
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

window.peerwatch = { loadPlot, yRange, displayBand, number, utcFull }; // for tests

// Plots follow the window's width (the band's least thickness is redone by the draw hook).
let resizing;
window.addEventListener("resize", () => {
  clearTimeout(resizing);
  resizing = setTimeout(() => {
    for (const box of document.querySelectorAll(".plot")) {
      if (box.uplot) box.uplot.setSize({ width: plotWidth(box), height: PLOT_HEIGHT });
    }
  }, 200);
});

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("ack");
  if (form) form.addEventListener("submit", acknowledge);
  if (typeof uPlot !== "undefined") eachPlot(loadPlot);
  watch();
});
