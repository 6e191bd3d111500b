// GET /debug/scheduler: a page that renders /debug/tasks and refreshes it every second.
// One self-contained document (no external scripts, styles or fonts), so it works on an
// admin port that sees no internet. Rates (polls/s, steals/s, parks/s) and the recent
// poll-time histogram come from the difference between two refreshes.
#include "admin/scheduler_page.h"

namespace sg::admin {

namespace {

// The document: styles, markup and the script that fetches /debug/tasks?format=json.
constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>stealgate scheduler</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#1d232a;background:#f6f7f9}
h1{font-size:18px;margin:0 0 4px}h2{font-size:14px;margin:18px 0 6px}
#status{color:#667}#status.err{color:#b00020}
#workers{display:flex;flex-wrap:wrap;gap:8px}
.worker{background:#fff;border:1px solid #d8dce2;border-radius:6px;padding:8px 10px;min-width:150px}
.worker b{font-size:13px}.bar{height:8px;background:#e6e9ee;border-radius:4px;margin:4px 0}
.bar i{display:block;height:8px;border-radius:4px;background:#2f7de1}
.kv{display:grid;grid-template-columns:auto auto;gap:0 10px;font-variant-numeric:tabular-nums}
.kv span:nth-child(even){text-align:right}
#histogram{display:flex;align-items:flex-end;gap:2px;height:120px;background:#fff;border:1px solid #d8dce2;
border-radius:6px;padding:8px}
.hb{flex:1;display:flex;flex-direction:column;justify-content:flex-end;align-items:center;height:100%;min-width:22px}
.hb i{display:block;width:100%;background:#2f7de1;min-height:1px}.hb small{font-size:10px;color:#667}
table{border-collapse:collapse;background:#fff;border:1px solid #d8dce2;width:100%}
th,td{padding:3px 8px;border-bottom:1px solid #eef0f3;text-align:right;white-space:nowrap}
th{background:#eef1f5;font-weight:600}td.l,th.l{text-align:left}
td.name{max-width:340px;overflow:hidden;text-overflow:ellipsis}
.running{color:#0a7d28}.runnable{color:#b36b00}.idle{color:#667}
</style></head>
<body data-refreshes="0">
<h1>stealgate scheduler</h1>
<div id="status">loading /debug/tasks ...</div>
<h2>Workers</h2><div id="workers"></div>
<h2>Poll time <small id="hist-scope"></small></h2><div id="histogram"></div>
<h2>Slowest recent polls</h2>
<table><thead><tr><th>poll</th><th>worker</th><th class="l">kind</th><th class="l">name</th><th>task</th><th>ago</th>
</tr></thead><tbody id="slow"></tbody></table>
<h2>Tasks by busy time <small id="task-count"></small></h2>
<table><thead><tr><th>id</th><th class="l">kind</th><th class="l">name</th><th class="l">state</th><th>polls</th>
<th>busy</th><th>queued</th><th>idle</th><th>longest poll</th><th>wakes local/remote/io/timer</th><th>worker</th>
</tr></thead><tbody id="tasks"></tbody></table>
<script>
"use strict";
let prev = null, prevAt = 0, refreshes = 0;
const $ = id => document.getElementById(id);
function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function dur(s) {
  if (s === null || s === undefined) return "-";
  if (s >= 1) return s.toFixed(2) + " s";
  if (s >= 1e-3) return (s * 1e3).toFixed(2) + " ms";
  return (s * 1e6).toFixed(1) + " \u00b5s";
}
function rate(cur, old, key, secs) {
  if (!old || secs <= 0) return "-";
  return Math.max(0, (cur[key] - old[key]) / secs).toFixed(0) + "/s";
}
function renderWorkers(d, secs) {
  $("workers").innerHTML = d.workers.map((w, i) => {
    const old = prev ? prev.workers[i] : null;
    const share = w.busy_share === null ? null : w.busy_share;
    const pct = share === null ? "-" : (share * 100).toFixed(0) + "%";
    return `<div class="worker" data-worker="${w.worker}"><b>worker ${w.worker}</b>` +
      `<div class="bar"><i style="width:${share === null ? 0 : (share * 100).toFixed(1)}%"></i></div>` +
      `<div class="kv"><span>busy</span><span class="busy">${pct}</span>` +
      `<span>queue</span><span class="queue">${w.local_queue_depth}</span>` +
      `<span>polls</span><span>${rate(w, old, "polls", secs)}</span>` +
      `<span>steals</span><span>${rate(w, old, "steals", secs)}</span>` +
      `<span>parks</span><span>${rate(w, old, "parks", secs)}</span>` +
      `<span>overflows</span><span>${w.overflows}</span>` +
      `<span>long polls</span><span>${w.long_polls}</span></div></div>`;
  }).join("");
}
function bucketLabel(le) {
  if (le === undefined) return "longer";
  return "<" + (le >= 1e-3 ? (le * 1e3).toFixed(le >= 1e-2 ? 0 : 1) + "ms" : (le * 1e6).toFixed(0) + "\u00b5s");
}
function renderHistogram(d) {
  const cur = d.poll_time.counts;
  const recent = prev ? cur.map((c, i) => c - prev.poll_time.counts[i]) : cur;
  const useRecent = prev && recent.some(c => c > 0);
  const counts = useRecent ? recent : cur;
  $("hist-scope").textContent = useRecent ? "(since the last refresh)" : "(since start)";
  let last = counts.length - 1;
  while (last > 0 && counts[last] === 0) last--;
  const max = Math.max(1, ...counts);
  let html = "";
  for (let i = 0; i <= Math.max(last, 3); i++) {
    const h = (counts[i] / max * 100).toFixed(1);
    html += `<div class="hb" title="${counts[i]} polls under ${bucketLabel(d.poll_time.le_seconds[i])}">` +
      `<i style="height:${h}%"></i><small>${bucketLabel(d.poll_time.le_seconds[i])}</small></div>`;
  }
  $("histogram").innerHTML = html;
}
function renderSlow(d) {
  $("slow").innerHTML = d.slow_polls.map(p =>
    `<tr><td>${dur(p.seconds)}</td><td>${p.worker}</td><td class="l">${esc(p.kind)}</td>` +
    `<td class="l name">${esc(p.name)}</td><td>${p.task === null ? "-" : p.task}</td>` +
    `<td>${p.ago_seconds.toFixed(1)} s</td></tr>`).join("") ||
    `<tr><td class="l" colspan="6">no polls recorded yet</td></tr>`;
}
function renderTasks(d) {
  if (!d.task_diagnostics) {
    $("task-count").textContent = "(runtime.task_diagnostics is off)";
    $("tasks").innerHTML = "";
    return;
  }
  $("task-count").textContent = `(${d.tasks_listed} of ${d.tasks_total} live)`;
  $("tasks").innerHTML = d.tasks.map(t =>
    `<tr class="task" data-kind="${esc(t.kind)}"><td>${t.id}</td><td class="l">${esc(t.kind)}</td>` +
    `<td class="l name" title="${esc(t.name)}">${esc(t.name)}</td><td class="l ${t.state}">${t.state}</td>` +
    `<td>${t.polls}</td><td>${dur(t.busy_seconds)}</td><td>${dur(t.scheduled_seconds)}</td>` +
    `<td>${dur(t.idle_seconds)}</td><td>${dur(t.max_poll_seconds)}</td>` +
    `<td>${t.wakes.local}/${t.wakes.remote}/${t.wakes.io}/${t.wakes.timer}</td>` +
    `<td>${t.last_worker === null ? "-" : t.last_worker}</td></tr>`).join("");
}
async function refresh() {
  try {
    const r = await fetch("/debug/tasks?limit=100", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    const d = await r.json();
    const now = performance.now();
    const secs = prev ? (now - prevAt) / 1000 : 0;
    renderWorkers(d, secs);
    renderHistogram(d);
    renderSlow(d);
    renderTasks(d);
    prev = d;
    prevAt = now;
    refreshes++;
    document.body.dataset.refreshes = String(refreshes);
    $("status").className = "";
    $("status").textContent = `${d.workers.length} workers on ${d.io_driver}; ` +
      `injection queue ${d.injection_queue_depth}; ` +
      `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    $("status").className = "err";
    $("status").textContent = "cannot load /debug/tasks: " + e.message;
  }
  setTimeout(refresh, 1000);
}
refresh();
</script></body></html>
)HTML";

}  // namespace

std::string_view scheduler_page() { return kPage; }

}  // namespace sg::admin
