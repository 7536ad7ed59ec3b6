// Tokenpath UI behaviour, loaded as a file so the CSP needs no inline script.
// Charts: each <div class="chart" data-chart="ID"> reads its series from a
// <script type="application/json" id="ID"> block and renders with uPlot.
(function () {
  "use strict";
  var root = document.documentElement;
  var saved = localStorage.getItem("tp-theme");
  if (saved) root.setAttribute("data-theme", saved);

  function cssVar(name) { return getComputedStyle(root).getPropertyValue(name).trim(); }

  function renderCharts(scope) {
    if (typeof uPlot === "undefined") return;
    (scope || document).querySelectorAll("[data-chart]").forEach(function (el) {
      if (el.dataset.rendered) return;
      var src = document.getElementById(el.dataset.chart);
      if (!src) return;
      var spec = JSON.parse(src.textContent);
      var width = el.clientWidth || 600;
      var series = [{}];
      var axes = [{ stroke: cssVar("--muted"), grid: { stroke: cssVar("--line") } },
                  { stroke: cssVar("--muted"), grid: { stroke: cssVar("--line") }, label: spec.yLabel || "", size: 60 }];
      var scales = { x: { time: true } };
      spec.series.forEach(function (s) {
        var o = { label: s.label, stroke: cssVar(s.color) || s.color, width: 2, scale: s.axis === 2 ? "y2" : "y" };
        if (s.fill) { o.fill = (cssVar(s.color) || s.color) + "55"; }
        if (s.dash) { o.dash = [6, 4]; }
        series.push(o);
      });
      if (spec.series.some(function (s) { return s.axis === 2; })) {
        axes.push({ side: 1, scale: "y2", stroke: cssVar("--muted"), grid: { show: false }, label: spec.y2Label || "", size: 60 });
        scales.y2 = spec.y2Range ? { range: spec.y2Range } : {};
      }
      var markers = spec.markers || [];
      var opts = {
        width: width, height: spec.height || 260, series: series, axes: axes, scales: scales,
        legend: { live: true },
        hooks: { draw: [function (u) {
          var ctx = u.ctx;
          markers.forEach(function (m) {
            var x = u.valToPos(m.t, "x", true);
            ctx.save();
            ctx.strokeStyle = cssVar("--c-cold") || "#e69f00";
            ctx.setLineDash([4, 3]);
            ctx.lineWidth = 2;
            ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
            ctx.fillStyle = cssVar("--ink");
            ctx.font = "11px system-ui";
            ctx.fillText(m.label, x + 4, u.bbox.top + 12);
            ctx.restore();
          });
        }] }
      };
      new uPlot(opts, spec.data, el);
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
