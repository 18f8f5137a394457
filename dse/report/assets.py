"""The page's stylesheet and script (kept as Python strings so they ship inside the package).

The script reads the JSON blob ``#report-data`` and

* plots every ``<div data-figure=NAME>`` (figures in ``data.figures``; lists shared between
  figures are stored once in ``data.shared`` and put back here);
* makes every ``<select data-switch=DIV_ID>`` swap the figure shown in that div;
* for a study report: builds the sortable Pareto table, and shows the selected design's detail
  figures when a Pareto point or a table row is clicked (``data.details``);
* draws a figure when it comes near the viewport (one at a time), so the first screen is ready
  without waiting for the WebGL figures further down;
* sets ``window.__report.ready`` once the figures of the first screen have rendered, and
  ``window.__report.complete`` once every figure has (``window.__report.drawAll()`` draws the
  rest without scrolling); ``window.__report.figures`` maps each drawn div to its trace and
  point counts and render time (ms). The browser test and the benchmark read these.

It writes text into the page with ``textContent`` only.
"""

REPORT_CSS = """
:root { --fg:#1f2430; --muted:#5b6270; --line:#d9dce3; --accent:#1f5fbf; --bg:#ffffff; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
       color:var(--fg); background:var(--bg); }
main { max-width: 1360px; margin: 0 auto; padding: 18px 24px 60px; }
h1 { font-size: 22px; margin: 4px 0 2px; word-break: break-word; }
h2 { font-size: 17px; margin: 28px 0 6px; padding-top: 10px; border-top: 1px solid var(--line); }
h3 { font-size: 15px; margin: 14px 0 4px; }
p.note, .muted { color: var(--muted); margin: 2px 0 8px; }
p.warn { color: #a33; margin: 4px 0 10px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0 4px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; min-width: 150px; }
.card .k { color: var(--muted); font-size: 12px; }
.card .v { font-size: 17px; font-weight: 600; white-space: nowrap; }
.plot { width: 100%; min-height: 120px; margin: 4px 0 10px; }
.grid2 { display: grid; grid-template-columns: 1fr 1fr; gap: 8px 18px; }
@media (max-width: 1000px) { .grid2 { grid-template-columns: 1fr; } }
.controls { display: flex; flex-wrap: wrap; gap: 14px; align-items: center; margin: 6px 0; }
.controls label { color: var(--muted); }
select { font: inherit; padding: 2px 4px; max-width: 520px; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0; }
dl.kv dt { color: var(--muted); } dl.kv dd { margin: 0; word-break: break-word; }
.tablewrap { max-height: 480px; overflow: auto; border: 1px solid var(--line); border-radius: 6px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
th { position: sticky; top: 0; background: #f3f5f9; cursor: pointer; user-select: none; }
th.sorted-asc::after { content: " \\25B2"; } th.sorted-desc::after { content: " \\25BC"; }
tbody tr { cursor: pointer; } tbody tr:hover { background: #f2f6fd; }
tbody tr.selected { background: #dde8fa; }
.error { color: #a11; }
"""

REPORT_JS = r"""
(function () {
  "use strict";
  var tScript = performance.now();  // HTML and plotly.js parsed and run by now
  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var BASE = {
    font: {family: "system-ui, -apple-system, 'Segoe UI', Roboto, Arial, sans-serif", size: 13, color: "#1f2430"},
    paper_bgcolor: "#ffffff", plot_bgcolor: "#fbfbfd", title: {x: 0.01, xanchor: "left"},
    margin: {l: 80, r: 30, t: 56, b: 64},
    hoverlabel: {align: "left", font: {size: 12, color: "#1f2430"}, bgcolor: "#ffffff", bordercolor: "#8a93a6"},
    colorway: ["#1f5fbf", "#e07b00", "#2b9348", "#c0392b", "#7b4fb3", "#8c564b", "#d6479b",
               "#5f6b7a", "#a8a400", "#12a4b6"],
    legend: {bgcolor: "rgba(255,255,255,0.85)", bordercolor: "#d9dce3", borderwidth: 1},
    xaxis: {gridcolor: "#e6e8ee", zerolinecolor: "#c8ccd6", automargin: true},
    yaxis: {gridcolor: "#e6e8ee", zerolinecolor: "#c8ccd6", automargin: true}
  };
  var CONFIG = {responsive: true, displaylogo: false, scrollZoom: false};
  var status = {ready: false, figures: {}, selected: null, script_ms: Math.round(tScript),
                data_ms: Math.round(performance.now() - tScript)};
  window.__report = status;

  function merge(base, over) {
    var out = {}, k;
    for (k in base) out[k] = base[k];
    for (k in over) {
      var b = out[k], o = over[k];
      if (b && o && typeof b === "object" && typeof o === "object" && !Array.isArray(b) && !Array.isArray(o))
        out[k] = merge(b, o);
      else out[k] = o;
    }
    return out;
  }
  function resolve(trace) {
    var t = {}, k;
    for (k in trace) {
      var v = trace[k];
      t[k] = (v && typeof v === "object" && !Array.isArray(v) && "$shared" in v) ? DATA.shared[v["$shared"]] : v;
    }
    return t;
  }
  function axisDefaults(layout) {
    // every cartesian axis (xaxis2, yaxis3...) gets the base grid style
    var out = {}, k;
    for (k in layout) {
      if (/^[xy]axis\d*$/.test(k)) out[k] = merge(BASE.xaxis, layout[k]);
    }
    return out;
  }
  function count(data) {
    var n = 0;
    data.forEach(function (t) {
      var arr = t.x || t.y || t.values || (t.dimensions && t.dimensions[0] && t.dimensions[0].values) || [];
      n += arr.length || 0;
    });
    return n;
  }
  function draw(div, name) {
    var fig = DATA.figures[name];
    if (!fig) return Promise.resolve();
    var data = fig.data.map(resolve);
    var layout = merge(merge(BASE, fig.layout), axisDefaults(fig.layout));
    div.dataset.shown = name;
    var t0 = performance.now();
    return Plotly.react(div, data, layout, CONFIG).then(function () {
      status.figures[div.id] = {name: name, traces: data.length, points: count(data),
                                ms: Math.round(performance.now() - t0)};
    });
  }

  // ------------------------------------------------------------------ details (study report)
  var details = DATA.details || {};
  function setText(id, text) { var e = document.getElementById(id); if (e) e.textContent = text; }
  function fillKV(id, pairs) {
    var dl = document.getElementById(id);
    if (!dl) return;
    while (dl.firstChild) dl.removeChild(dl.firstChild);
    (pairs || []).forEach(function (p) {
      var dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = p[0]; dd.textContent = p[1];
      dl.appendChild(dt); dl.appendChild(dd);
    });
  }
  function showWorkload(d, w) {
    var wl = d.workloads[w];
    var jobs = [];
    document.querySelectorAll("[data-detail]").forEach(function (div) {
      var name = wl && wl.figures[div.dataset.detail];
      if (name) jobs.push(want(div, name));
      else { div.dataset.figure = ""; if (div.dataset.shown) { Plotly.purge(div); div.dataset.shown = ""; }
             delete status.figures[div.id]; }
    });
    fillKV("detail-totals", wl ? wl.totals : []);
    return Promise.all(jobs);
  }
  function selectDesign(trial) {
    var key = String(trial);
    var d = details[key];
    status.selected = key;
    var sel = document.getElementById("design-select");
    if (sel && d) sel.value = key;
    document.querySelectorAll("#pareto-table tbody tr").forEach(function (tr) {
      tr.classList.toggle("selected", tr.dataset.trial === key);
    });
    if (!d) {
      setText("detail-message", "Trial " + key + " is not one of the Pareto designs with details; " +
              "pick a Pareto point (filled circle) or a row of the table.");
      return Promise.resolve();
    }
    setText("detail-title", d.label);
    setText("detail-message", d.error ? "Could not re-simulate this design: " + d.error : "");
    fillKV("detail-design", d.info);
    var wsel = document.getElementById("workload-select");
    if (wsel) {
      while (wsel.firstChild) wsel.removeChild(wsel.firstChild);
      d.workloads.forEach(function (wl, i) {
        var o = document.createElement("option"); o.value = String(i); o.textContent = wl.label; wsel.appendChild(o);
      });
      wsel.parentNode.style.display = d.workloads.length > 1 ? "" : "none";
    }
    return showWorkload(d, 0);
  }
  function hookClicks(div) {
    if (!div.on || div.dataset.clickHooked) return;
    div.dataset.clickHooked = "1";
    div.on("plotly_click", function (ev) {
      var p = ev && ev.points && ev.points[0];
      if (!p || p.customdata === undefined) return;
      var cd = Array.isArray(p.customdata) ? p.customdata[0] : p.customdata;
      selectDesign(cd);
    });
  }

  // ------------------------------------------------------------------ sortable table
  function buildTable() {
    var t = DATA.table, table = document.getElementById("pareto-table");
    if (!t || !table) return;
    var thead = table.querySelector("thead"), tbody = table.querySelector("tbody");
    var tr = document.createElement("tr");
    t.columns.forEach(function (c, i) {
      var th = document.createElement("th");
      th.textContent = c; th.title = "sort by " + c;
      th.addEventListener("click", function () { sortBy(i, th); });
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    t.rows.forEach(function (row, r) {
      var rtr = document.createElement("tr");
      rtr.dataset.trial = String(t.trials[r]);
      rtr.dataset.row = String(r);
      row.forEach(function (cell) {
        var td = document.createElement("td"); td.textContent = cell; rtr.appendChild(td);
      });
      rtr.addEventListener("click", function () { selectDesign(t.trials[r]); });
      tbody.appendChild(rtr);
    });
    var dir = {};
    function sortBy(i, th) {
      var asc = !dir[i]; dir = {}; dir[i] = asc;
      thead.querySelectorAll("th").forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
      th.classList.add(asc ? "sorted-asc" : "sorted-desc");
      var rows = Array.prototype.slice.call(tbody.querySelectorAll("tr"));
      rows.sort(function (a, b) {
        var va = t.keys[+a.dataset.row][i], vb = t.keys[+b.dataset.row][i];
        var c = (typeof va === "number" && typeof vb === "number") ? va - vb
              : String(va).localeCompare(String(vb), undefined, {numeric: true});
        return asc ? c : -c;
      });
      rows.forEach(function (row) { tbody.appendChild(row); });
    }
  }

  // ------------------------------------------------------------------ lazy drawing
  // A figure is drawn when it comes near the viewport (or when drawAll() is called), one at a
  // time, so the first screen is ready early and WebGL figures below it do not hold it up.
  var queue = Promise.resolve();
  var forceAll = false;
  function enqueue(div) {
    queue = queue.then(function () {
      var name = div.dataset.figure;
      if (!name || div.dataset.shown === name) return;
      return draw(div, name).then(function () { hookClicks(div); checkComplete(); });
    }).catch(function (err) {  // keep drawing the others; the error shows in the console
      status.error = String(err);
      console.error("report: figure " + div.id + " failed to render: " + err);
    });
    return queue;
  }
  function want(div, name) {
    div.dataset.figure = name;
    if (forceAll || div._near || !observer) return enqueue(div);
    return Promise.resolve();
  }
  function plotDivs() { return document.querySelectorAll("[data-figure], [data-detail]"); }
  function checkComplete() {
    var all = true;
    plotDivs().forEach(function (div) {
      if (div.dataset.figure && div.dataset.shown !== div.dataset.figure) all = false;
    });
    if (all && status.ready) { status.complete = true; status.complete_ms = Math.round(performance.now()); }
    return all;
  }
  // The observer reports every observed element once soon after observe(); `seen` resolves
  // when all have been reported, so `ready` waits for the figures of the first screen.
  var unseen = 0, seenResolve = null;
  var seen = new Promise(function (r) { seenResolve = r; });
  var observer = ("IntersectionObserver" in window) ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (!e.target._seen) { e.target._seen = true; unseen -= 1; }
      e.target._near = e.isIntersecting;
      if (e.isIntersecting) enqueue(e.target);
    });
    if (unseen <= 0) seenResolve();
  }, {rootMargin: "200px 0px"}) : null;
  status.drawAll = function () {
    forceAll = true;
    plotDivs().forEach(function (div) { enqueue(div); });
    return queue.then(function () { checkComplete(); return status.complete; });
  };

  // ------------------------------------------------------------------ start
  function start() {
    buildTable();
    var t0 = performance.now();
    document.querySelectorAll("select[data-switch]").forEach(function (sel) {
      sel.addEventListener("change", function () { want(document.getElementById(sel.dataset.switch), sel.value); });
    });
    var dsel = document.getElementById("design-select");
    if (dsel) dsel.addEventListener("change", function () { selectDesign(dsel.value); });
    var wsel = document.getElementById("workload-select");
    if (wsel) wsel.addEventListener("change", function () {
      var d = details[status.selected]; if (d) showWorkload(d, +wsel.value);
    });
    if (DATA.initial_design !== undefined && DATA.initial_design !== null) selectDesign(DATA.initial_design);
    var divs = plotDivs();
    unseen = divs.length;
    if (!observer || !unseen) seenResolve();
    divs.forEach(function (div) { if (observer) observer.observe(div); else enqueue(div); });
    seen.then(function () { return queue; }).then(function () {
      status.ready = true;
      status.ms = Math.round(performance.now());
      status.plot_ms = Math.round(performance.now() - t0);
      document.documentElement.dataset.ready = "1";
      checkComplete();
    }, function (err) {
      status.error = String(err);
      console.error("report: a figure failed to render: " + err);
    });
  }
  start();
})();
"""
