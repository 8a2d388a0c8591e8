// Draws the report's charts with the inlined Chart.js from the inlined report data; no network.
(function () {
  "use strict";
  const doc = JSON.parse(document.getElementById("report-data").textContent);
  const COLORS = {
    kv_cache: "#dc2626", batch_cap: "#eab308", compute: "#ea580c", healthy: "#16a34a",
    idle: "#2563eb", unknown: "#6b7280", down: "#7f1d1d",
  };
  const CLASSES = Object.keys(COLORS);
  const DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
  const state = {};
  Chart.defaults.animation = false;
  Chart.defaults.font.family = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif";

  function utc(t) {
    return new Date(t * 1000).toISOString().slice(5, 16).replace("T", " ");
  }

  // whole hours, or days, so that about a dozen ticks label the range
  function tickStep(span) {
    const steps = [600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400];
    return steps.find((s) => span / s <= 12) || 7 * 86400;
  }

  function make(id, config) {
    const canvas = document.getElementById("chart-" + id);
    const chart = new Chart(canvas, config);
    const points = chart.data.datasets.reduce((n, d) => n + d.data.filter((x) => x !== null).length, 0);
    const rect = canvas.getBoundingClientRect();
    state[id] = {
      type: config.type, datasets: chart.data.datasets.length, points: points,
      rect: { x: rect.x, y: rect.y, width: rect.width, height: rect.height },
    };
  }

  function timeline() {
    const labels = doc.timeline.map((k) => k.model_name ? k.target + " · " + k.model_name : k.target);
    const datasets = CLASSES.map((cls) => ({
      label: cls, backgroundColor: COLORS[cls], borderSkipped: false, barPercentage: 0.8,
      data: doc.timeline.flatMap((k, i) => k.segments.filter((s) => s[2] === cls)
        .map((s) => ({ x: [s[0], s[1]], y: labels[i] }))),
    })).filter((d) => d.data.length);
    make("timeline", {
      type: "bar", data: { labels: labels, datasets: datasets },
      options: {
        indexAxis: "y", maintainAspectRatio: false, grouped: false,
        scales: {
          x: { type: "linear", min: doc.range.start, max: doc.range.end,
            ticks: { stepSize: tickStep(doc.range.end - doc.range.start), callback: (v) => utc(v) } },
          y: { stacked: true },
        },
        plugins: { tooltip: { callbacks: { label: (c) => c.dataset.label + " " + utc(c.raw.x[0]) + " – " + utc(c.raw.x[1]) } } },
      },
    });
  }

  function throughput() {
    const hours = doc.hourly;
    const labels = hours.map((h) => utc(h.start));
    // what the replicas sustained at saturation, each at its own model's rate
    const caps = doc.targets.map((e) => (doc.capacity[e.model_name] || {}).generation_tokens_per_s_per_replica);
    const datasets = [{
      label: "generation tokens/s (fleet)", data: hours.map((h) => h.generation_tokens_per_s),
      borderColor: "#111827", backgroundColor: "rgba(17,24,39,0.15)", fill: true, stepped: true,
    }];
    if (caps.every((c) => c)) {
      const fleet = caps.reduce((a, b) => a + b, 0);
      datasets.push({
        label: "sustained capacity of the " + caps.length + " replicas", data: hours.map(() => fleet),
        borderColor: "#dc2626", borderDash: [6, 4], pointRadius: 0,
      });
    }
    make("throughput", { type: "line", data: { labels: labels, datasets: datasets },
      options: { maintainAspectRatio: false, scales: { y: { beginAtZero: true, title: { display: true, text: "tokens/s" } } } } });
  }

  function heatmap() {
    const cells = doc.fleet.traffic.heatmap;
    const max = Math.max(1e-9, ...cells.map((c) => c.generation_tokens_per_s));
    make("heatmap", {
      type: "matrix",
      data: { datasets: [{
        label: "generation tokens/s", data: cells.map((c) => ({ x: c.hour, y: c.day, v: c.generation_tokens_per_s })),
        backgroundColor: (ctx) => {
          const v = ctx.raw ? ctx.raw.v / max : 0;
          return v ? "rgba(37,99,235," + (0.12 + 0.88 * v).toFixed(3) + ")" : "#f3f4f6";
        },
        borderColor: "#ffffff", borderWidth: 1,
        width: ({ chart }) => (chart.chartArea || {}).width / 24 - 1,
        height: ({ chart }) => (chart.chartArea || {}).height / 7 - 1,
      }] },
      options: {
        maintainAspectRatio: false, plugins: { legend: { display: false },
          tooltip: { callbacks: { label: (c) => c.raw.y + " " + c.raw.x + ":00 UTC: " + c.raw.v.toFixed(1) + " tokens/s" } } },
        scales: {
          x: {
            type: "linear", min: -0.5, max: 23.5, offset: false, grid: { display: false },
            afterBuildTicks: (axis) => { axis.ticks = Array.from({ length: 24 }, (_, h) => ({ value: h })); },
            ticks: { autoSkip: false, maxRotation: 0, callback: (v) => (v % 3 === 0 ? v + "h" : "") },
          },
          y: { type: "category", labels: DAYS, offset: true, grid: { display: false } },
        },
      },
    });
  }

  function cost() {
    const rows = doc.targets;
    const price = doc.prices.gpu_hour_usd;
    const gpus = doc.prices.gpus_per_target;
    const unit = price === null ? "GPU-hours" : "USD";
    const datasets = CLASSES.map((cls) => ({
      label: cls, backgroundColor: COLORS[cls],
      data: rows.map((e) => e.hours[cls] * gpus * (price === null ? 1 : price)),
    })).filter((d) => d.data.some((v) => v > 0));
    const f = doc.fleet;
    const scenarios = price === null
      ? [f.gpu_hours, f.gpu_hours_if_idle_unpaid, f.gpu_hours_following_traffic]
      : [f.cost_usd, f.cost_if_idle_unpaid_usd, f.cost_following_traffic_usd];
    const labels = rows.map((e) => e.target);
    labels.push("fleet: reserved", "fleet: idle unpaid", "fleet: following traffic");
    datasets.forEach((d) => d.data.push(null, null, null));
    datasets.push({ label: "fleet scenarios", backgroundColor: "#374151",
      data: rows.map(() => null).concat(scenarios) });
    make("cost", { type: "bar", data: { labels: labels, datasets: datasets },
      options: { maintainAspectRatio: false, scales: { x: { stacked: true }, y: { stacked: true, title: { display: true, text: unit } } } } });
  }

  for (const draw of [timeline, throughput, heatmap, cost]) {
    try { draw(); } catch (err) { console.error("chart " + draw.name + ": " + err); state[draw.name] = { error: String(err) }; }
  }
  window.kvdoctorCharts = state;
  document.getElementById("chart-state").textContent = JSON.stringify(state);
})();
