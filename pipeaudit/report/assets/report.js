// pipeaudit HTML report: draws the charts of the inlined JSON data as SVG. No library, no network.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("pa-data").textContent);
  var W = 1000; // viewBox width of every chart
  var WAIT_OPACITY = 0.3; // an action's span where it waits: its colour, pale
  var tip = document.getElementById("pa-tip");

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function fmt(x, d) { return x === null || x === undefined ? "-" : Number(x).toFixed(d === undefined ? 2 : d); }
  function pct(x) { return x === null || x === undefined ? "-" : (100 * x).toFixed(1) + "%"; }

  // "nice" axis ticks between lo and hi
  function ticks(lo, hi, n) {
    var span = hi - lo;
    if (!(span > 0)) { return [lo]; }
    var raw = span / (n || 6), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 2.5, 5, 10].map(function (m) { return m * mag; })
      .filter(function (s) { return s >= raw; })[0] || 10 * mag;
    var out = [], t = Math.ceil(lo / step) * step;
    for (; t <= hi + 1e-9 * step; t += step) { out.push(+t.toFixed(10)); }
    return out;
  }

  // tooltips: any element with data-tip shows it on hover
  function bindTips(root) {
    root.addEventListener("mousemove", function (ev) {
      var el = ev.target.closest ? ev.target.closest("[data-tip]") : null;
      if (!el) { tip.hidden = true; return; }
      tip.textContent = el.getAttribute("data-tip");
      tip.hidden = false;
      var x = ev.clientX + 14, y = ev.clientY + 14;
      if (x + tip.offsetWidth > window.innerWidth) { x = ev.clientX - tip.offsetWidth - 10; }
      if (y + tip.offsetHeight > window.innerHeight) { y = ev.clientY - tip.offsetHeight - 10; }
      tip.style.left = x + "px"; tip.style.top = y + "px";
    });
    root.addEventListener("mouseleave", function () { tip.hidden = true; });
  }

  function xAxis(x0, x1, scale, y, h, unit) {
    var s = '<g class="axis">';
    ticks(x0, x1, 8).forEach(function (t) {
      var x = scale(t);
      s += '<line class="grid" x1="' + x + '" x2="' + x + '" y1="0" y2="' + y + '"></line>';
      s += '<line x1="' + x + '" x2="' + x + '" y1="' + y + '" y2="' + (y + 4) + '"></line>';
      s += '<text x="' + x + '" y="' + (y + 16) + '" text-anchor="middle">' + esc(t) + "</text>";
    });
    s += '<text x="' + W / 2 + '" y="' + (y + h) + '" text-anchor="middle">' + esc(unit) + "</text></g>";
    return s;
  }

  // ------------------------------------------------------------------ timeline of one step
  function stepByNumber(k) {
    for (var i = 0; i < D.steps.length; i++) { if (D.steps[i].step === k) { return D.steps[i]; } }
    return D.steps[0];
  }

  function drawTimeline() {
    var box = document.getElementById("pa-timeline");
    if (!D.steps.length) { box.innerHTML = '<p class="empty">No pipeline steps to draw.</p>'; return; }
    var sel = document.getElementById("pa-step");
    var st = stepByNumber(Number(sel.value));
    var showIdeal = document.getElementById("pa-show-ideal").checked && st.ideal;
    var left = 92, right = 16, rowH = 24, idealH = 15, gap = 10, top = 8;
    var tmax = st.window_ms;
    if (showIdeal && st.ideal_ms) { tmax = Math.max(tmax, st.ideal_ms); }
    var scale = function (t) { return left + (W - left - right) * t / (tmax || 1); };
    var ranks = D.ranks, y = top, s = "", rowY = {};
    ranks.forEach(function (r) {
      rowY[r] = { m: y, i: y + rowH + 2 };
      y += rowH + (showIdeal ? idealH + 4 : 0) + gap;
    });
    var plotH = y;
    s += xAxis(0, tmax, scale, plotH, 34, "ms from the step window's start");
    ranks.forEach(function (r) {
      var ry = rowY[r];
      s += '<rect x="' + scale(0) + '" y="' + ry.m + '" width="' + (scale(st.window_ms) - scale(0)) +
        '" height="' + rowH + '" fill="' + D.colours.bubble + '" data-tip="rank ' + r +
        ': no action here (bubble)"></rect>';
      s += '<text x="' + (left - 8) + '" y="' + (ry.m + rowH / 2 + 4) + '" text-anchor="end" font-weight="600">rank ' + r + "</text>";
      if (showIdeal) {
        s += '<text x="' + (left - 8) + '" y="' + (ry.i + idealH / 2 + 4) + '" text-anchor="end" fill="#666">ideal</text>';
      }
    });
    var multi = {};
    st.actions.forEach(function (a) { multi[a[0]] = multi[a[0]] || {}; multi[a[0]][a[1]] = 1; });
    function label(a) { return (Object.keys(multi[a[0]] || {}).length > 1 ? a[1] : "") + a[2] + a[3]; }
    var n = 0;
    st.actions.forEach(function (a) {
      // a = [rank, stage, kind, mb, cs, ce, compute_ms, span_ms, start, end, [[from, to] computing]]
      // the whole span, pale: waiting inside the action; its compute drawn solid over it
      var x0 = scale(Math.min(a[8], a[4])), x1 = scale(Math.max(a[9], a[5])), w = Math.max(x1 - x0, 0.8);
      var ry = rowY[a[0]].m, colour = D.kinds[a[2]] || "#777";
      var t = "action " + a[1] + a[2] + a[3] + " (stage " + a[1] + ", " + a[2] + ", microbatch " + a[3] + ")\n" +
        "rank " + a[0] + ", step " + st.step + "\ncompute " + fmt(a[6], 3) + " ms\nspan    " + fmt(a[7], 3) +
        " ms (waiting " + fmt(Math.max(a[7] - a[6], 0), 3) + " ms)\nfirst compute at +" + fmt(a[4], 3) +
        " ms, last at +" + fmt(a[5], 3) + " ms";
      s += '<rect class="act measured" x="' + x0 + '" y="' + ry + '" width="' + w + '" height="' + rowH +
        '" fill="' + colour + '" fill-opacity="' + WAIT_OPACITY + '" data-tip="' + esc(t) + '"></rect>';
      a[10].forEach(function (c) {
        var c0 = scale(c[0]);
        s += '<rect class="act compute" x="' + c0 + '" y="' + ry + '" width="' + Math.max(scale(c[1]) - c0, 0.8) +
          '" height="' + rowH + '" fill="' + colour + '" data-tip="' + esc(t) + '"></rect>';
      });
      if (w > 16) {
        s += '<text x="' + (x0 + w / 2) + '" y="' + (ry + rowH / 2 + 4) + '" text-anchor="middle" fill="#fff" ' +
          'pointer-events="none" font-size="' + (w > 26 ? 11 : 9) + '">' + esc(label(a)) + "</text>";
      }
      n++;
    });
    if (showIdeal) {
      st.ideal.forEach(function (a) {
        // a = [rank, stage, kind, mb, start, end]
        var x0 = scale(a[4]), w = Math.max(scale(a[5]) - x0, 0.8), ry = rowY[a[0]].i;
        var t = "replay ideal " + a[1] + a[2] + a[3] + " (rank " + a[0] + ")\ncompute " + fmt(a[5] - a[4], 3) +
          " ms\nstarts at +" + fmt(a[4], 3) + " ms (no communication cost)";
        s += '<rect class="act ideal" x="' + x0 + '" y="' + ry + '" width="' + w + '" height="' + idealH +
          '" fill="' + (D.kinds[a[2]] || "#777") + '" fill-opacity="0.55" data-tip="' + esc(t) + '"></rect>';
      });
      var xi = scale(st.ideal_ms || 0);
      s += '<line x1="' + xi + '" x2="' + xi + '" y1="0" y2="' + plotH + '" stroke="' + D.colours.ideal +
        '" stroke-dasharray="4 3"></line><text x="' + (xi - 4) + '" y="' + (plotH - 4) + '" text-anchor="end" fill="' +
        D.colours.ideal + '">ideal ends ' + fmt(st.ideal_ms, 1) + " ms</text>";
    }
    var xm = scale(st.window_ms);
    s += '<line x1="' + xm + '" x2="' + xm + '" y1="0" y2="' + plotH + '" stroke="#333" stroke-dasharray="4 3"></line>';
    var h = plotH + 40;
    box.innerHTML = '<svg id="pa-timeline-svg" viewBox="0 0 ' + W + " " + h + '" data-step="' + st.step +
      '" data-actions="' + n + '" role="img" aria-label="timeline of step ' + st.step + '">' + s + "</svg>" +
      '<p class="hint">Step ' + st.step + ": window " + fmt(st.window_ms, 2) + " ms, bubble " + pct(st.bubble) +
      "; replay ideal " + (st.ideal_ms === null ? "-" : fmt(st.ideal_ms, 2) + " ms") + ", bubble " +
      pct(st.ideal_bubble) + ".</p>";
  }

  function initTimeline() {
    var sel = document.getElementById("pa-step");
    D.steps.forEach(function (st) {
      var o = document.createElement("option");
      o.value = st.step;
      o.textContent = st.step + (st.step === D.median_step ? " (median)" : "");
      if (st.step === D.median_step) { o.selected = true; }
      sel.appendChild(o);
    });
    sel.addEventListener("change", drawTimeline);
    document.getElementById("pa-show-ideal").addEventListener("change", drawTimeline);
    var leg = "";
    Object.keys(D.kinds).forEach(function (k) {
      leg += '<span class="sw" style="background:' + D.kinds[k] + '"></span>' + k;
    });
    leg += '<span class="sw" style="background:' + D.kinds.F + ';opacity:' + WAIT_OPACITY +
      '"></span>pale: waiting inside the action';
    leg += '<span class="sw" style="background:' + D.colours.bubble + '"></span>no action';
    document.getElementById("pa-kind-legend").innerHTML = leg;
    drawTimeline();
  }

  // ------------------------------------------------------------------ bubble bars
  function drawBubble() {
    var box = document.getElementById("pa-bubble"), B = D.bubble;
    if (!B.ranks.length) { box.innerHTML = '<p class="empty">No pipeline ranks.</p>'; return; }
    var left = 50, right = 150, top = 10, h = 220, n = B.ranks.length;
    var ymax = 0.05;
    B.ranks.forEach(function (r) { ymax = Math.max(ymax, r.measured || 0, r.ideal || 0); });
    ymax = Math.max(ymax, B.theory || 0);
    ymax = Math.min(1, Math.ceil(ymax * 10 + 0.5) / 10);
    var y = function (v) { return top + h - h * v / ymax; };
    var slot = (W - left - right) / n, bw = Math.min(40, slot / 3), s = '<g class="axis">';
    ticks(0, ymax, 5).forEach(function (t) {
      s += '<line class="grid" x1="' + left + '" x2="' + (W - right) + '" y1="' + y(t) + '" y2="' + y(t) + '"></line>';
      s += '<text x="' + (left - 6) + '" y="' + (y(t) + 4) + '" text-anchor="end">' + Math.round(t * 100) + "%</text>";
    });
    s += "</g>";
    B.ranks.forEach(function (r, i) {
      var cx = left + slot * (i + 0.5);
      [["measured", r.measured, D.colours.measured, -1], ["replay ideal", r.ideal, D.colours.ideal, 0]].forEach(function (b) {
        if (b[1] === null || b[1] === undefined) { return; }
        var x = cx + b[3] * bw;
        s += '<rect class="bar" x="' + x + '" y="' + y(b[1]) + '" width="' + (bw - 2) + '" height="' + (top + h - y(b[1])) +
          '" fill="' + b[2] + '" data-tip="rank ' + r.rank + " " + b[0] + ": " + pct(b[1]) + '"></rect>';
      });
      s += '<text x="' + cx + '" y="' + (top + h + 16) + '" text-anchor="middle">rank ' + r.rank + "</text>";
    });
    if (B.theory !== null && B.theory !== undefined) {
      s += '<line x1="' + left + '" x2="' + (W - right) + '" y1="' + y(B.theory) + '" y2="' + y(B.theory) +
        '" stroke="' + D.colours.theory + '" stroke-width="2" stroke-dasharray="6 4" data-tip="theory ' +
        esc(B.formula || "") + " = " + pct(B.theory) + '"></line>';
    }
    var lx = W - right + 14, ly = top + 14;
    [["measured", D.colours.measured], ["replay ideal", D.colours.ideal]].forEach(function (l, i) {
      s += '<rect x="' + lx + '" y="' + (ly + i * 18 - 9) + '" width="11" height="11" fill="' + l[1] + '"></rect>' +
        '<text x="' + (lx + 16) + '" y="' + (ly + i * 18) + '">' + l[0] + "</text>";
    });
    s += '<line x1="' + lx + '" x2="' + (lx + 11) + '" y1="' + (ly + 32) + '" y2="' + (ly + 32) + '" stroke="' +
      D.colours.theory + '" stroke-width="2" stroke-dasharray="4 2"></line><text x="' + (lx + 16) + '" y="' + (ly + 36) +
      '">theory ' + pct(B.theory) + "</text>";
    box.innerHTML = '<svg id="pa-bubble-svg" viewBox="0 0 ' + W + " " + (top + h + 30) + '">' + s + "</svg>";
  }

  // ------------------------------------------------------------------ step-line charts
  function drawLines(id, series, yLabel, emptyText, integer) {
    var box = document.getElementById(id);
    series = series.filter(function (se) { return se.t.length; });
    if (!series.length) { box.innerHTML = '<p class="empty">' + esc(emptyText) + "</p>"; return; }
    var left = 60, right = 130, top = 10, h = 210;
    var x1 = D.run_ms || 1, ymax = 0;
    series.forEach(function (se) {
      se.v.forEach(function (v) { ymax = Math.max(ymax, v); });
      if (se.expected) { ymax = Math.max(ymax, se.expected); }
      x1 = Math.max(x1, se.t[se.t.length - 1]);
    });
    ymax = ymax > 0 ? ymax * 1.08 : 1;
    var sx = function (t) { return left + (W - left - right) * t / x1; };
    var sy = function (v) { return top + h - h * v / ymax; };
    var s = '<g class="axis">';
    ticks(0, ymax, 5).forEach(function (t) {
      if (integer && t !== Math.round(t)) { return; }
      s += '<line class="grid" x1="' + left + '" x2="' + (W - right) + '" y1="' + sy(t) + '" y2="' + sy(t) + '"></line>';
      s += '<text x="' + (left - 6) + '" y="' + (sy(t) + 4) + '" text-anchor="end">' + esc(t) + "</text>";
    });
    s += '<text transform="translate(14 ' + (top + h / 2) + ') rotate(-90)" text-anchor="middle">' + esc(yLabel) + "</text></g>";
    s += xAxis(0, x1, sx, top + h, 34, "ms from the run's start");
    series.forEach(function (se, i) {
      var c = D.colours.series[i % D.colours.series.length], d = "";
      for (var j = 0; j < se.t.length; j++) {
        var px = sx(se.t[j]).toFixed(2), py = sy(se.v[j]).toFixed(2);
        d += (j === 0 ? "M" + px + " " + py : "H" + px + "V" + py);
      }
      var peak = Math.max.apply(null, se.v);
      s += '<path d="' + d + '" fill="none" stroke="' + c + '" stroke-width="1.6" data-tip="' + esc(se.label) +
        ": peak " + esc(integer ? peak : fmt(peak, 1)) + (se.expected ? " (expected " + se.expected + ")" : "") + '"></path>';
      var ly = top + 12 + i * 17;
      s += '<rect x="' + (W - right + 14) + '" y="' + (ly - 9) + '" width="11" height="11" fill="' + c + '"></rect>' +
        '<text x="' + (W - right + 30) + '" y="' + ly + '">' + esc(se.label) + "</text>";
    });
    box.innerHTML = '<svg id="' + id + '-svg" viewBox="0 0 ' + W + " " + (top + h + 44) + '">' + s + "</svg>";
  }

  // ------------------------------------------------------------------ small multiples (one strip per series)
  function drawStrips(id, series, emptyText) {
    var box = document.getElementById(id);
    series = series.filter(function (se) { return se.t.length; });
    if (!series.length) { box.innerHTML = '<p class="empty">' + esc(emptyText) + "</p>"; return; }
    var left = 92, right = 130, top = 6, sh = 44, gap = 8, x1 = D.run_ms || 1, ymax = 1;
    series.forEach(function (se) {
      se.v.forEach(function (v) { ymax = Math.max(ymax, v); });
      if (se.expected) { ymax = Math.max(ymax, se.expected); }
      x1 = Math.max(x1, se.t[se.t.length - 1]);
    });
    var sx = function (t) { return left + (W - left - right) * t / x1; };
    var s = "", y0 = top;
    series.forEach(function (se, i) {
      var c = D.colours.series[i % D.colours.series.length];
      var sy = function (v) { return y0 + sh - sh * v / ymax; };
      s += '<rect x="' + left + '" y="' + y0 + '" width="' + (W - left - right) + '" height="' + sh + '" fill="#fafafa"></rect>';
      s += '<text x="' + (left - 8) + '" y="' + (y0 + sh / 2 + 4) + '" text-anchor="end" font-weight="600">' + esc(se.label) + "</text>";
      s += '<text x="' + (left - 8) + '" y="' + (y0 + sh) + '" text-anchor="end" fill="#888" font-size="9">0</text>';
      var d = "", peak = 0;
      for (var j = 0; j < se.t.length; j++) {
        var px = sx(se.t[j]).toFixed(2), py = sy(se.v[j]).toFixed(2);
        d += (j === 0 ? "M" + px + " " + py : "H" + px + "V" + py);
        peak = Math.max(peak, se.v[j]);
      }
      s += '<path d="' + d + '" fill="none" stroke="' + c + '" stroke-width="1.6"></path>';
      if (se.expected !== null && se.expected !== undefined) {
        s += '<line x1="' + left + '" x2="' + (W - right) + '" y1="' + sy(se.expected) + '" y2="' + sy(se.expected) +
          '" stroke="#555" stroke-dasharray="5 3"></line>';
      }
      s += '<text x="' + (W - right + 10) + '" y="' + (y0 + sh / 2 + 4) + '" data-tip="' + esc(se.label) +
        ": peak " + peak + " microbatches in flight" + (se.expected !== null && se.expected !== undefined ?
        ", schedule expects " + se.expected : "") + '">peak ' + peak +
        (se.expected !== null && se.expected !== undefined ? " / exp. " + se.expected : "") + "</text>";
      s += '<rect x="' + left + '" y="' + y0 + '" width="' + (W - left - right) + '" height="' + sh +
        '" fill="transparent" data-tip="' + esc(se.label) + ": peak " + peak + '"></rect>';
      y0 += sh + gap;
    });
    s = xAxis(0, x1, sx, y0, 34, "ms from the run's start (dashed: the schedule's expected peak)") + s;
    box.innerHTML = '<svg id="' + id + '-svg" viewBox="0 0 ' + W + " " + (y0 + 40) + '">' + s + "</svg>";
  }

  initTimeline();
  drawBubble();
  drawStrips("pa-inflight", D.inflight, "No pipeline actions.");
  drawLines("pa-memory", D.memory, "MiB allocated",
    "No [memory] samples in these traces (profile with profile_memory=True to see memory).", false);
  bindTips(document.querySelector("main"));
  document.body.setAttribute("data-rendered", "ok");
})();
