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
    const series = [{}];
    const columns = [data.t];
    data.utilization.forEach(function (values, i) {
      series.push({ label: host.dataset.labelUtil.replace("%(n)s", i), stroke: COLORS[i % 8], scale: "%", width: 1.5 });
      columns.push(values);
    });
    data.memory_gb.forEach(function (values, i) {
      series.push({ label: host.dataset.labelMem.replace("%(n)s", i), stroke: COLORS[i % 8], dash: [4, 4], scale: "GB", width: 1 });
      columns.push(values);
    });
    const width = Math.max(320, host.clientWidth || 640);
    new uPlot({
      width: width,
      height: 220,
      series: series,
      scales: { "%": { range: [0, 100] }, GB: { auto: true } },
      axes: [{}, { scale: "%", label: "%" }, { scale: "GB", side: 1, label: "GB", grid: { show: false } }],
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
