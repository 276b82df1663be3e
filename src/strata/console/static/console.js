// strata console: live charts (uPlot), a sortable and filterable topic table, body views.
// Text from the store is only ever set with textContent, never as HTML.
"use strict";

const REFRESH_MS = 2000;

function chart(el, title, series, data) {
  const opts = {
    width: Math.max(300, el.clientWidth || 600), height: 220,
    series: [{}].concat(series.map((s, i) => ({label: s, stroke: ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280"][i % 5], width: 2}))),
    axes: [{}, {size: 70}],
  };
  el.dataset.points = String(data[0].length);
  if (el._plot) { el._plot.setData(data); return; }
  el._plot = new uPlot(opts, data, el);
}

// After the first answer the charts ask with ?after=SEQ (the last sample they have): the
// server answers once the sampler has taken the next one, from that sample's reading, so
// polling costs the store no reading of its own.
let overviewSeq = null;
let lagSeq = null;

async function refreshOverview() {
  const after = overviewSeq === null ? "" : "?after=" + overviewSeq;
  const resp = await fetch("/api/overview" + after, {credentials: "same-origin"});
  if (!resp.ok) return;
  const ov = await resp.json();
  const r = ov.rates;
  overviewSeq = r.seq;
  const m = document.getElementById("chart-messages");
  const b = document.getElementById("chart-bytes");
  if (m) chart(m, "messages", ["in /s", "consumed /s"], [r.t, r.messages_in, r.messages_out]);
  if (b) chart(b, "bytes", ["bytes in /s"], [r.t, r.bytes_in]);
  for (const [id, v] of [["ov-topics", ov.topics], ["ov-queues", ov.queues],
                         ["ov-messages", ov.messages], ["ov-groups", ov.groups],
                         ["ov-log-end", ov.commitlog.confirmed]]) {
    const el = document.getElementById(id);
    if (el) el.textContent = String(v);
  }
}

async function refreshLag() {
  // one group is enough: the chart reads only "history", which covers the groups it shows
  const after = lagSeq === null ? "" : "&after=" + lagSeq;
  const resp = await fetch("/api/groups?per_page=1" + after, {credentials: "same-origin"});
  if (!resp.ok) return;
  const g = await resp.json();
  lagSeq = g.history.seq;
  const el = document.getElementById("chart-lag");
  const names = Object.keys(g.history.lag);
  if (el) chart(el, "lag", names, [g.history.t].concat(names.map(n => g.history.lag[n])));
}

function every(fn) {
  // the next poll REFRESH_MS after an answer (a long poll may take up to a sample interval)
  const next = () => fn().catch(() => {}).finally(() => setTimeout(next, REFRESH_MS));
  next();
}

function sortable(table) {
  const heads = table.tHead.rows[0].cells;
  for (let i = 0; i < heads.length; i++) {
    const th = heads[i];
    th.classList.add("sort");
    th.addEventListener("click", () => {
      const asc = th.dataset.dir !== "asc";
      for (const h of heads) delete h.dataset.dir;
      th.dataset.dir = asc ? "asc" : "desc";
      const num = th.dataset.type === "num";
      const body = table.tBodies[0];
      const rows = Array.from(body.rows);
      const key = r => num ? Number(r.cells[i].textContent) : r.cells[i].textContent;
      rows.sort((a, b) => {
        const x = key(a), y = key(b);
        return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
      });
      body.append(...rows);
    });
  }
}

function filterable(input, table, counter) {
  let timer = null;
  input.addEventListener("input", () => {
    if (table.dataset.paged === "1") {    // rows of other pages too: the server filters
      clearTimeout(timer);
      timer = setTimeout(() => input.form.submit(), 400);
      return;
    }
    const needle = input.value.toLowerCase();
    let shown = 0;
    for (const r of table.tBodies[0].rows) {
      const hit = r.dataset.name.toLowerCase().includes(needle);
      r.hidden = !hit;
      if (hit) shown++;
    }
    if (counter) counter.textContent = String(shown);
  });
}

function tabs() {
  for (const btn of document.querySelectorAll("[data-show]")) {
    btn.addEventListener("click", () => {
      for (const pre of document.querySelectorAll("pre.body")) pre.hidden = pre.id !== btn.dataset.show;
    });
  }
}

function confirmForms() {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", ev => {
      if (!window.confirm(form.dataset.confirm)) ev.preventDefault();
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "overview") every(refreshOverview);
  if (page === "groups") every(refreshLag);
  for (const t of document.querySelectorAll("table.sortable")) sortable(t);
  const f = document.getElementById("filter");
  if (f) filterable(f, document.getElementById("topics"), document.getElementById("shown"));
  tabs();
  confirmForms();
});
