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

  // fmtTick writes an axis tick: as fmtUnit, without a trailing ".0",
  // and a count as a whole number.
  function fmtTick(v, unit) {
    if (unit === "count" || v === 0) return String(Math.round(v));
    return fmtUnit(v, unit).replace(/\.0 /, " ");
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

  // Value-axis steps: 1, 2 or 5 × 10^n in the unit the axis shows. Values
  // are in ms and seconds are ms / 1000, so the same steps read "2 s",
  // "500 ms"; a count steps by whole numbers.
  var ROUND_INCRS = [];
  for (var e = -3; e <= 9; e++) [1, 2, 5].forEach(function (m) { ROUND_INCRS.push(m * Math.pow(10, e)); });
  var COUNT_INCRS = ROUND_INCRS.filter(function (v) { return v >= 1; });

  // Lines that may lie on each other (two services with the same TTFT)
  // stay apart by dash pattern as well as colour.
  var DASHES = [null, [8, 4], [2, 3], [12, 3, 2, 3], [4, 4], [1, 4]];

  // latestIndex is the last bucket with a value: the legend shows it until
  // the pointer picks another, so it never reads "—" before a hover.
  function latestIndex(col) {
    for (var i = col.length - 1; i >= 0; i--) if (col[i] != null) return i;
    return null;
  }

  // MARKER_GAP is the least room (CSS px) between two event labels.
  var MARKER_GAP = 6;

  // placeMarkers draws the event lines and puts their labels in the plot
  // overlay as elements. Events closer than a label's width collapse into
  // one marker that counts them ("3 events"); labels stay inside the plot
  // area, so they never cross each other or the y-axis. Events outside the
  // shown range are not drawn.
  function placeMarkers(u, markers) {
    var over = u.over;
    over.querySelectorAll(".chart-marker").forEach(function (n) { n.remove(); });
    var width = over.clientWidth;
    var pts = markers.map(function (m) { return { x: u.valToPos(m.t, "x"), t: m.t, label: m.label }; })
      .filter(function (m) { return m.x >= 0 && m.x <= width; })
      .sort(function (a, b) { return a.x - b.x; });
    var groups = [];
    pts.forEach(function (m) {
      var g = groups[groups.length - 1];
      if (g && m.x < g.end + MARKER_GAP) { g.items.push(m); layout(g); return; }
      g = { items: [m] };
      layout(g);
      // A label pushed left at the right edge may reach back over the one
      // before it: then the two are one marker.
      var prev = groups[groups.length - 1];
      if (prev && g.left < prev.end + MARKER_GAP) { prev.items.push(m); layout(prev); return; }
      groups.push(g);
    });
    function layout(g) {
      var n = g.items.length;
      g.text = n === 1 ? g.items[0].label : n + " events";
      g.title = g.items.map(function (i) { return clockUTC(i.t) + " " + i.label; }).join("\n");
      if (!g.el) {
        g.el = document.createElement("span");
        g.el.className = "chart-marker";
        over.appendChild(g.el);
      }
      g.el.textContent = g.text;
      g.el.title = g.title;
      g.el.hidden = false;
      var w = g.el.offsetWidth;
      // A plot too narrow for the label keeps the count, else only the
      // line (its title still names the events).
      if (w > width) { g.el.textContent = String(n); w = g.el.offsetWidth; }
      if (w > width) { g.el.hidden = true; w = 0; }
      g.left = Math.max(0, Math.min(g.items[0].x + 3, width - w));
      g.end = g.left + w;
      g.el.style.left = g.left + "px";
    }
    var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
    ctx.save();
    ctx.strokeStyle = cssVar("--c-cold") || "#e69f00";
    ctx.setLineDash([4 * uPlot.pxRatio, 3 * uPlot.pxRatio]);
    ctx.lineWidth = 2 * uPlot.pxRatio;
    groups.forEach(function (g) {
      g.el.dataset.count = g.items.length;
      g.items.forEach(function (m) {
        var x = Math.round(u.bbox.left + m.x * uPlot.pxRatio);
        ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
      });
    });
    ctx.restore();
  }

  function renderCharts(scope) {
    if (typeof uPlot === "undefined") return;
    (scope || document).querySelectorAll("[data-chart]").forEach(function (el) {
      if (el.dataset.rendered) return;
      var src = document.getElementById(el.dataset.chart);
      if (!src) return;
      var spec = JSON.parse(src.textContent);
      var data = spec.data;
      var width = el.clientWidth || 600;
      var xs = spec.data[0] || [];
      var series = [{ value: function (u, ts, si, idx) {
        if (idx == null) {
          var last = latestIndex(xs);
          return last == null ? "" : "latest, " + dayUTC(xs[last]) + " " + clockUTC(xs[last], true);
        }
        return ts == null ? "" : dayUTC(ts) + " " + clockUTC(ts, true);
      } }];
      var units = { y: spec.yUnit, y2: spec.y2Unit, y3: spec.y3Unit };
      var narrow = width < 520;
      function valueAxis(scale, label, side) {
        var unit = units[scale];
        // A phone's chart keeps its plot area by narrowing the axes.
        var a = { scale: scale, stroke: cssVar("--muted"), label: label || "", size: narrow ? 44 : 64, labelSize: narrow ? 18 : 30,
          incrs: unit === "count" ? COUNT_INCRS : ROUND_INCRS,
          grid: scale === "y" ? { stroke: cssVar("--line") } : { show: false } };
        if (side != null) a.side = side;
        // The labels drawn last are kept on the chart element (data-y-ticks,
        // data-y2-ticks, data-y3-ticks), as the x axis's are.
        if (unit) a.values = function (u, splits) {
          var labels = splits.map(function (v) { return fmtTick(v, unit); });
          el.dataset[scale + "Ticks"] = labels.join("|");
          return labels;
        };
        return a;
      }
      var axes = [{ stroke: cssVar("--muted"), grid: { stroke: cssVar("--line") }, values: timeTicks(el) },
                  valueAxis("y", spec.yLabel)];
      var scales = { x: { time: true } };
      var lines = 0;
      spec.series.forEach(function (s, i) {
        var scale = s.axis === 3 ? "y3" : s.axis === 2 ? "y2" : "y";
        var color = cssVar(s.color) || s.color;
        var o = { label: s.label, stroke: color, width: s.bold ? 3.5 : 2, scale: scale, show: !s.hidden };
        if (s.fill) { o.fill = color + "55"; }
        if (s.dash) { o.dash = [6, 4]; }
        else if (!s.fill && !s.bold && scale === "y") { o.dash = DASHES[lines % DASHES.length] || undefined; lines++; }
        var unit = units[scale];
        var col = spec.data[i + 1];
        // The legend shows the hovered bucket's value, else the latest
        // bucket's.
        o.value = function (u, v, si, idx) {
          if (idx == null) idx = latestIndex(col);
          return idx == null ? "no data" : fmtUnit(col[idx], unit);
        };
        series.push(o);
      });
      if (spec.series.some(function (s) { return s.axis === 2; })) {
        axes.push(valueAxis("y2", spec.y2Label, 1));
        scales.y2 = units.y2 === "pct" ? { range: [0, 100] } : {};
      }
      if (spec.series.some(function (s) { return s.axis === 3; })) {
        axes.push(valueAxis("y3", spec.y3Label, 1));
        scales.y3 = units.y3 === "count" ? { range: function (u, min, max) { return [0, Math.max(1, max)]; } } : {};
      }
      var markers = spec.markers || [];
      var opts = {
        width: width, height: spec.height || 260, series: series, axes: axes, scales: scales,
        // Pages print times in UTC; the charts' axes follow.
        tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
        legend: { live: true },
        hooks: { draw: [function (u) { placeMarkers(u, markers); }] }
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
