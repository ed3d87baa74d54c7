// The lease page's utilization chart: per-GPU utilization and memory, drawn with the
// vendored uPlot from the JSON the page embeds. Redrawn when HTMX swaps the lease in.
(function () {
  "use strict";
  const COLORS = ["#3a5bd9", "#d9733a", "#2f9e6e", "#b8399a", "#8a6d1f", "#1f8a8a", "#6b3ad9", "#d93a4f"];

  function draw(host) {
    if (host.dataset.drawn || typeof uPlot === "undefined") return;
    const source = document.getElementById(host.dataset.utilization);
    if (!source) return;
    const data = JSON.parse(source.textContent);
    // Times in the page's language and time zone ("12月4日 14:05", "Dec 4, 14:05"), on the 24-hour clock the pages use,,
    // never uPlot's English defaults in the browser's zone.
    const lang = document.documentElement.lang || undefined;
    const zone = host.dataset.timeZone || "UTC";
    const clock = new Intl.DateTimeFormat(lang, { timeZone: zone, hourCycle: "h23", hour: "2-digit", minute: "2-digit" });
    const moment = new Intl.DateTimeFormat(lang, { timeZone: zone, hourCycle: "h23", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
    const series = [{
      label: host.dataset.labelTime,
      value: function (u, v) { return v == null ? "–" : moment.format(new Date(v * 1000)); },
    }];
    const columns = [data.t];
    data.utilization.forEach(function (values, i) {
      series.push({ label: host.dataset.labelUtil.replace("%(n)s", i), stroke: COLORS[i % 8], scale: "%", width: 1.5 });
      columns.push(values);
    });
    data.memory_gb.forEach(function (values, i) {
      series.push({ label: host.dataset.labelMem.replace("%(n)s", i), stroke: COLORS[i % 8], dash: [4, 4], scale: "GB", width: 1 });
      columns.push(values);
    });
    // As wide as its box (a phone's is narrower than 320 px), with room between the times.
    const width = Math.max(240, host.clientWidth || 640);
    new uPlot({
      width: width,
      height: 220,
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), zone); },
      series: series,
      scales: { "%": { range: [0, 100] }, GB: { auto: true } },
      axes: [
        {
          space: 70,
          values: function (u, ticks) { return ticks.map(function (v) { return clock.format(new Date(v * 1000)); }); },
        },
        { scale: "%", label: "%", size: 44 },
        { scale: "GB", side: 1, label: "GB", size: 50, grid: { show: false } },
      ],
    }, columns, host);
    host.dataset.drawn = "1";
  }

  function drawAll() {
    document.querySelectorAll("[data-utilization]").forEach(draw);
  }

  document.addEventListener("DOMContentLoaded", drawAll);
  document.addEventListener("htmx:afterSwap", drawAll);
  window.addEventListener("load", drawAll);
})();
