// Tokenpath UI behaviour, loaded as a file so the CSP needs no inline script.
// Charts: each <div class="chart" data-chart="ID"> reads its series from a
// <script type="application/json" id="ID"> block and renders with uPlot.
(function () {
  "use strict";
  var root = document.documentElement;
  var saved = localStorage.getItem("tp-theme");
  if (saved) root.setAttribute("data-theme", saved);

  function cssVar(name) { return getComputedStyle(root).getPropertyValue(name).trim(); }

  // fmtUnit writes a value the way the pages do: "850 ms", "1.25 s", "97 %".
  function fmtUnit(v, unit) {
    if (v == null || isNaN(v)) return "—";
    if (unit === "ms") {
      var a = Math.abs(v);
      if (a < 10) return (Math.round(v * 10) / 10) + " ms";
      if (a < 999.5) return Math.round(v) + " ms";
      if (a < 9995) return (v / 1000).toFixed(2).replace(/0$/, "") + " s";
      return (v / 1000).toFixed(1) + " s";
    }
    if (unit === "pct") return Math.round(v) + " %";
    return String(Math.round(v * 10) / 10);
  }

  // Times on the charts read as on the pages: UTC, 24-hour, day before
  // month ("14:20", "5 Dec"), not uPlot's "2:20pm" and "12/5/26".
  var MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  function pad2(n) { return n < 10 ? "0" + n : String(n); }
  function clockUTC(ts, seconds) {
    var d = new Date(ts * 1e3);
    return pad2(d.getUTCHours()) + ":" + pad2(d.getUTCMinutes()) + (seconds ? ":" + pad2(d.getUTCSeconds()) : "");
  }
  function dayUTC(ts) { var d = new Date(ts * 1e3); return d.getUTCDate() + " " + MONTHS[d.getUTCMonth()]; }

  // timeTicks labels the x axis: the clock (to the second when ticks are
  // under a minute apart), the day under the first tick and under each
  // tick that starts a new day, and the day alone for ticks a day apart.
  // The labels drawn last are kept on the chart element (data-x-ticks).
  function timeTicks(el) {
    return function (u, splits, axisIdx, space, incr) {
      var prevDay = null;
      var labels = splits.map(function (ts) {
        if (ts == null) return null;
        var day = dayUTC(ts);
        var label = incr >= 86400 ? day : clockUTC(ts, incr < 60);
        if (incr < 86400 && day !== prevDay) label += "\n" + day;
        prevDay = day;
        return label;
      });
      el.dataset.xTicks = labels.join("|");
      return labels;
    };
  }

  // stackData turns series into running totals (bottom series first), so
  // uPlot bands can draw a stacked area; a bucket with no value at all
  // stays empty.
  function stackData(data) {
    var out = [data[0]];
    var acc = data[0].map(function () { return null; });
    for (var i = 1; i < data.length; i++) {
      acc = acc.map(function (a, j) {
        var v = data[i][j];
        if (v == null) return a;
        return (a || 0) + v;
      });
      out.push(acc.slice());
    }
    return out;
  }

  function renderCharts(scope) {
    if (typeof uPlot === "undefined") return;
    (scope || document).querySelectorAll("[data-chart]").forEach(function (el) {
      if (el.dataset.rendered) return;
      var src = document.getElementById(el.dataset.chart);
      if (!src) return;
      var spec = JSON.parse(src.textContent);
      var data = spec.stack ? stackData(spec.data) : spec.data;
      var width = el.clientWidth || 600;
      var series = [{ value: function (u, ts) { return ts == null ? "—" : dayUTC(ts) + " " + clockUTC(ts, true); } }];
      var axes = [{ stroke: cssVar("--muted"), grid: { stroke: cssVar("--line") }, values: timeTicks(el) },
                  { stroke: cssVar("--muted"), grid: { stroke: cssVar("--line") }, label: spec.yLabel || "", size: 60 }];
      var scales = { x: { time: true } };
      spec.series.forEach(function (s) {
        var o = { label: s.label, stroke: cssVar(s.color) || s.color, width: 2, scale: s.axis === 2 ? "y2" : "y" };
        if (s.fill) { o.fill = (cssVar(s.color) || s.color) + (spec.stack ? "a0" : "55"); }
        if (s.dash) { o.dash = [6, 4]; }
        var unit = s.axis === 2 ? spec.y2Unit : spec.yUnit;
        if (unit || spec.stack) {
          // The legend shows each part's own value, not the running total.
          o.value = function (u, v, si, idx) { return fmtUnit(idx == null ? v : spec.data[si][idx], unit); };
        }
        series.push(o);
      });
      if (spec.series.some(function (s) { return s.axis === 2; })) {
        axes.push({ side: 1, scale: "y2", stroke: cssVar("--muted"), grid: { show: false }, label: spec.y2Label || "", size: 60 });
        scales.y2 = spec.y2Range ? { range: spec.y2Range } : {};
      }
      if (spec.yUnit) axes[1].values = function (u, splits) { return splits.map(function (v) { return fmtUnit(v, spec.yUnit).replace(/\.0 /, " "); }); };
      var bands = [];
      if (spec.stack) {
        for (var bi = 2; bi < series.length; bi++) bands.push({ series: [bi, bi - 1] });
      }
      var markers = spec.markers || [];
      var opts = {
        width: width, height: spec.height || 260, series: series, axes: axes, scales: scales, bands: bands,
        // Pages print times in UTC; the charts' axes follow.
        tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
        legend: { live: true },
        hooks: { draw: [function (u) {
          var ctx = u.ctx;
          // Labels of close markers go on up to three rows; beyond that the
          // line is drawn and the label is left to the event list.
          var rowEnds = [-Infinity, -Infinity, -Infinity];
          markers.forEach(function (m) {
            var x = u.valToPos(m.t, "x", true);
            ctx.save();
            ctx.strokeStyle = cssVar("--c-cold") || "#e69f00";
            ctx.setLineDash([4, 3]);
            ctx.lineWidth = 2;
            ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
            ctx.fillStyle = cssVar("--ink");
            ctx.font = "11px system-ui";
            var row = rowEnds.findIndex(function (end) { return x + 4 > end; });
            if (row >= 0) {
              ctx.fillText(m.label, x + 4, u.bbox.top + 12 + 14 * row);
              rowEnds[row] = x + 4 + ctx.measureText(m.label).width + 6;
            }
            ctx.restore();
          });
        }] }
      };
      new uPlot(opts, data, el);
      el.dataset.rendered = "1";
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    renderCharts(document);
    var toggle = document.getElementById("theme-toggle");
    if (toggle) toggle.addEventListener("click", function () {
      var dark = root.getAttribute("data-theme") === "dark" ||
        (!root.getAttribute("data-theme") && matchMedia("(prefers-color-scheme: dark)").matches);
      var next = dark ? "light" : "dark";
      root.setAttribute("data-theme", next);
      localStorage.setItem("tp-theme", next);
      document.querySelectorAll("[data-chart]").forEach(function (el) { el.innerHTML = ""; delete el.dataset.rendered; });
      renderCharts(document);
    });
    // A phone starts with the pickers and filters folded (the requests
    // filters only when none is set), so the page's answer comes first.
    if (matchMedia("(max-width: 600px)").matches) {
      document.querySelectorAll("details.filters-box:not([data-filtered])").forEach(function (d) { d.open = false; });
    }
    document.querySelectorAll("[data-copy]").forEach(function (b) {
      b.addEventListener("click", function () {
        navigator.clipboard.writeText(b.dataset.copy).then(function () { b.textContent = "Copied"; });
      });
    });
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) { if (!confirm(f.dataset.confirm)) e.preventDefault(); });
    });
  });
  document.addEventListener("htmx:afterSwap", function (e) { renderCharts(e.target); });
})();

// A link to #span-… or #call-… opens the target's <details> (span
// attributes on the trace page); without script the summary still works.
(function () {
  "use strict";
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    if (!id) return;
    var el = document.getElementById(id);
    if (el && el.tagName === "DETAILS") el.open = true;
  }
  window.addEventListener("hashchange", openTarget);
  document.addEventListener("DOMContentLoaded", openTarget);
})();
