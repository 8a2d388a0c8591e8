// kvdoctor status page: polls the JSON API and draws one card per (target, model). No dependencies, no build step.
"use strict";

const POLL_MS = 5000;
const MAX_POINTS = 720;
const SVG_NS = "http://www.w3.org/2000/svg";
const CLASS_LABEL = {
  kv_cache: "KV cache", batch_cap: "batch cap", compute: "compute",
  healthy: "healthy", idle: "idle", unknown: "unknown", down: "down",
};
// worst first, so problems are on top
const RANK = { down: 0, kv_cache: 1, compute: 2, batch_cap: 3, unknown: 4, healthy: 5, idle: 6 };
// series colours by position in their chart (registry order)
const PALETTE = ["#2563eb", "#6b7280", "#9ca3af", "#ea580c", "#7c3aed", "#dc2626"];

const history = new Map(); // "target\u0000model" -> points, oldest first
let newestT = null;

// ---- formatting: every number with its unit ----
function round(v, digits) {
  return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}
function pct(r) {
  const p = r * 100;
  return (p >= 10 || p === 0 ? round(p, 0) : round(p, 1)) + " %";
}
function dur(s) {
  if (s >= 100) return round(s, 0) + " s";
  if (s >= 1) return round(s, 1) + " s";
  if (s >= 0.001) return round(s * 1000, s >= 0.01 ? 0 : 1) + " ms";
  return round(s * 1e6, 0) + " µs";
}
function count(v) {
  return round(v, v >= 10 || Math.abs(v - Math.round(v)) < 0.05 ? 0 : 1);
}
function perSec(v) {
  return round(v, v >= 10 ? 0 : v >= 1 ? 1 : 2) + "/s";
}
function tokens(v) {
  return round(v, 0) + " tokens";
}
function tokRate(v) {
  return round(v, 0) + " tokens/s";
}
function ago(s) {
  s = Math.max(0, s);
  if (s < 90) return round(s, 0) + " s";
  if (s < 5400) return round(s / 60, 0) + " min";
  if (s < 172800) return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
  return round(s / 86400, 0) + " d";
}
function clock(t) {
  return new Date(t * 1000).toLocaleTimeString("en-GB", { hour12: false });
}

// evidence key -> [label, formatter], from kvdoctor's signal registry (GET api/v1/signals, loaded once)
const UNIT_FMT = { pct, count, rate: perSec, seconds: dur, "tok/s": tokRate, tokens, plain: count };
let FIELDS = null;
let CHARTS = []; // [{title, unit, line, series: [{key, label, style}]}], in registry order
async function loadFields() {
  const reg = await getJSON("api/v1/signals");
  FIELDS = Object.fromEntries(reg.signals.map((s) => [s.key, [s.short, UNIT_FMT[s.unit] || count]]));
  const byTitle = new Map();
  for (const s of reg.signals.filter((x) => x.chart)) {
    if (!byTitle.has(s.chart)) byTitle.set(s.chart, { title: s.chart, unit: s.unit, line: "", series: [] });
    const c = byTitle.get(s.chart);
    c.series.push({ key: s.key, label: s.short, style: s.chart_style });
    c.line = c.line || s.chart_line;
  }
  CHARTS = [...byTitle.values()];
}
function fmtKey(key, v) {
  if (typeof v !== "number") return [key.replace(/_/g, " "), String(v)];
  const f = FIELDS && FIELDS[key];
  if (f) return [f[0], f[1](v)];
  if (key.endsWith("_s")) return [key.slice(0, -2).replace(/_/g, " "), dur(v)];
  if (key.endsWith("_ratio")) return [key.replace(/_/g, " "), pct(v)];
  return [key.replace(/_/g, " "), count(v)];
}

// ---- DOM helpers (textContent only: server strings never become markup) ----
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function badge(cls) {
  return el("span", "badge badge-" + cls, CLASS_LABEL[cls] || cls);
}
// advice text marks flags and values with `backticks`: show them as code
function richText(parent, text) {
  String(text).split("`").forEach((part, i) => {
    if (part) parent.append(i % 2 ? el("code", null, part) : document.createTextNode(part));
  });
  return parent;
}

// ---- charts: small inline SVG line charts of the history window ----
const W = 240, H = 92, PAD_L = 4, PAD_R = 4, PAD_T = 14, PAD_B = 14;

function chart(title, points, series, opts) {
  const box = el("figure", "chart");
  const cap = el("figcaption");
  cap.append(el("span", "chart-title", title));
  const legend = el("span", "legend");
  for (const s of series) {
    const last = [...points].reverse().find((p) => typeof p[s.key] === "number");
    if (!last && s.optional) continue;
    const item = el("span", "legend-item");
    const swatch = el("i", "swatch" + (s.dash ? " dashed" : ""));
    swatch.style.borderColor = s.color;
    item.append(swatch, document.createTextNode(s.label + " " + (last ? opts.fmt(last[s.key]) : "–")));
    legend.append(item);
  }
  cap.append(legend);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "spark", role: "img", "aria-label": title });
  const vals = points.flatMap((p) => series.map((s) => p[s.key]).filter((v) => typeof v === "number"));
  const hline = opts.hline;
  const yMax = opts.yMax ?? Math.max(1e-9, ...vals, hline ?? 0) * 1.15;
  const t0 = points.length ? points[0].t : 0;
  const t1 = points.length ? points[points.length - 1].t : 1;
  const x = (t) => PAD_L + (t1 > t0 ? ((t - t0) / (t1 - t0)) * (W - PAD_L - PAD_R) : W - PAD_R);
  const y = (v) => PAD_T + (1 - Math.min(v, yMax) / yMax) * (H - PAD_T - PAD_B);
  for (const f of [0, 0.5, 1]) {
    root.append(svg("line", { x1: PAD_L, x2: W - PAD_R, y1: y(f * yMax), y2: y(f * yMax), class: "grid" }));
  }
  if (vals.length) root.append(svg("text", { x: PAD_L, y: PAD_T - 4, class: "axis" }, opts.fmt(yMax)));
  root.append(svg("text", { x: PAD_L, y: H - 3, class: "axis" }, points.length > 1 ? "−" + ago(t1 - t0) : ""));
  root.append(svg("text", { x: W - PAD_R, y: H - 3, class: "axis", "text-anchor": "end" }, points.length ? clock(t1) : "no data yet"));
  if (!vals.length) {
    root.append(svg("text", { x: W / 2, y: H / 2 + 3, class: "nodata", "text-anchor": "middle" }, "no data"));
  }
  if (hline !== undefined) {
    root.append(svg("line", { x1: PAD_L, x2: W - PAD_R, y1: y(hline), y2: y(hline), class: "slo" }));
  }
  for (const s of series) {
    let seg = [];
    const flush = () => {
      if (seg.length === 1) root.append(svg("circle", { cx: seg[0][0], cy: seg[0][1], r: 2, fill: s.color }));
      if (seg.length > 1) {
        const d = seg.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(" ");
        if (s.fill) {
          const area = `${seg[0][0].toFixed(1)},${y(0)} ${d} ${seg[seg.length - 1][0].toFixed(1)},${y(0)}`;
          root.append(svg("polygon", { points: area, fill: s.color, "fill-opacity": "0.15" }));
        }
        root.append(svg("polyline", {
          points: d, fill: "none", stroke: s.color, "stroke-width": s.dash ? 1.5 : 2,
          "stroke-dasharray": s.dash ? "4 3" : "none", "stroke-linejoin": "round",
        }));
      }
      seg = [];
    };
    for (const p of points) {
      if (typeof p[s.key] === "number") seg.push([x(p.t), y(p[s.key])]);
      else flush();
    }
    flush();
  }
  box.append(cap, root);
  return box;
}

function charts(points, ev) {
  const row = el("div", "charts");
  for (const c of CHARTS) {
    const series = c.series.map((s, i) => ({
      key: s.key, label: s.label, color: PALETTE[i % PALETTE.length],
      fill: s.style === "fill", dash: s.style === "dash", optional: s.style === "dash",
    }));
    const hline = c.line && typeof ev[c.line] === "number" ? ev[c.line] : undefined;
    row.append(chart(c.title, points, series, { fmt: UNIT_FMT[c.unit] || count, yMax: c.unit === "pct" ? 1 : undefined, hline }));
  }
  return row;
}

// ---- cards ----
function tile(label, value, sub, hot) {
  const t = el("div", "tile" + (hot ? " hot" : ""));
  t.append(el("div", "tile-value", value), el("div", "tile-label", label));
  if (sub) t.append(el("div", "tile-sub", sub));
  return t;
}

function tiles(d, ev) {
  const row = el("div", "tiles");
  const num = (k) => (typeof ev[k] === "number" ? ev[k] : undefined);
  const b = d ? d.bottleneck : "unknown";
  const kv = num("kv_usage"), kvMax = num("kv_usage_max_1m");
  if (kv !== undefined || kvMax !== undefined) {
    row.append(tile("KV usage", pct(kv ?? kvMax), kvMax !== undefined ? "max 1m " + pct(kvMax) : "", b === "kv_cache"));
  }
  const running = num("running_max_1m") ?? num("running");
  const cap = num("batch_cap_configured") ?? num("batch_cap_inferred");
  if (running !== undefined) {
    const capText = cap !== undefined ? " / cap " + count(cap) : "";
    const sub = num("running_avg_1m") !== undefined ? "avg 1m " + count(num("running_avg_1m")) : "";
    const label = num("running_max_1m") !== undefined ? "running (max 1m)" : "running";
    row.append(tile(label, count(running) + capText, sub, b === "batch_cap"));
  }
  const waiting = num("waiting_avg_1m") ?? num("waiting");
  if (waiting !== undefined) row.append(tile("waiting", count(waiting), "avg 1m", waiting >= 1));
  const pre = num("preemptions_per_s");
  if (pre !== undefined) row.append(tile("preemptions", perSec(pre), "", pre > 0));
  const ttft = num("ttft_p95_s");
  if (ttft !== undefined) {
    const slo = num("slo_ttft_p95_s");
    row.append(tile("TTFT p95", dur(ttft), slo !== undefined ? "SLO " + dur(slo) : "", slo !== undefined && ttft > slo));
  }
  const itl = num("itl_p50_s");
  if (itl !== undefined) {
    const base = num("itl_baseline_s");
    row.append(tile("ITL p50", dur(itl), base !== undefined ? "baseline " + dur(base) : "", b === "compute"));
  }
  return row;
}

function adviceList(advice) {
  const ul = el("ul", "advice");
  for (const a of advice) {
    const li = el("li");
    if (a.flag) li.append(el("code", "flag", a.flag), document.createTextNode(" "));
    richText(li, a.text);
    if (a.source) li.append(el("span", "source", " (" + a.source + ")"));
    if (a.effect && a.effect.text) li.append(el("div", "predicted", "predicted: " + a.effect.text));
    ul.append(li);
  }
  return ul;
}

function runbookLink(f) {
  if (!f || !/^https?:\/\//.test(f.runbook || "")) return null;
  const link = el("a", "runbook", "runbook");
  link.href = f.runbook;
  link.title = "what " + f.name + " means and what to change";
  return link;
}

function findingBlock(f, showAdvice) {
  const box = el("div", "finding sev-" + f.severity);
  const head = el("div", "finding-head");
  head.append(el("span", "sev", f.severity), el("span", "finding-summary", f.summary));
  const link = runbookLink(f);
  if (link) head.append(link);
  box.append(head);
  if (f.description) box.append(el("p", "finding-desc", f.description));
  const entries = Object.entries(f.evidence || {}).filter(([k]) => k !== "error");
  if (entries.length) {
    const chips = el("div", "evidence");
    for (const [k, v] of entries) {
      const [label, value] = fmtKey(k, v);
      const chip = el("span", "chip");
      chip.append(el("span", "chip-label", label + " "), el("b", null, value));
      chips.append(chip);
    }
    box.append(chips);
  }
  if (showAdvice && f.advice && f.advice.length) box.append(adviceList(f.advice));
  return box;
}

function card(d, stats, points, now) {
  const cls = d ? d.bottleneck : "unknown";
  const down = stats ? stats.up === false : false;
  const c = el("section", "card card-" + (down ? "down" : cls));
  c.dataset.target = d ? d.target : stats.name;
  c.dataset.bottleneck = cls;
  const head = el("div", "card-head");
  const name = el("h2", "target-name", d ? d.target : stats.name);
  if (d && d.model_name) name.append(el("span", "model", d.model_name));
  const badges = el("div", "badges");
  if (down) badges.append(badge("down"));
  badges.append(badge(cls));
  head.append(name, badges);
  c.append(head);
  if (d) {
    const since = el("div", "since", `since ${clock(d.since)} · for ${ago(d.t - d.since)}`);
    if (stats && stats.url) since.append(el("span", "url", " · " + stats.url));
    c.append(since);
  }
  if (down) {
    const err = el("div", "down-error");
    err.append(el("b", null, "scrape failed: "), document.createTextNode(stats.last_error || "no answer"));
    const last = stats.last_success_ts ? `last success ${ago(now - stats.last_success_ts)} ago` : "never scraped successfully";
    const sub = el("div", "down-sub", `${last} · ${stats.errors_total} failed scrapes `);
    const link = runbookLink(d && d.findings.find((f) => f.name === "target_down"));
    if (link) sub.append(link);
    err.append(sub);
    c.append(err);
  }
  const ignored = (stats && stats.invalid_values) || [];
  const failed = Object.entries((stats && stats.step_errors) || {});
  if (ignored.length || failed.length) {
    // values the target sent that cannot be, and steps that failed for it alone: said as text, never markup
    const box = el("ul", "invalid-values");
    for (const note of ignored) box.append(el("li", null, note));
    for (const [step, why] of failed) box.append(el("li", null, `${step} failed: ${why}`));
    c.append(box);
  }
  if (!d) {
    c.append(el("p", "empty", "no diagnosis yet: waiting for the first evaluation"));
    return c;
  }
  const ev = d.evidence || {};
  const main = d.findings.find((f) => f.bottleneck && f.bottleneck === d.bottleneck);
  if (main) c.append(el("p", "headline", main.summary));
  c.append(tiles(d, ev));
  if (d.advice && d.advice.length) {
    const box = el("div", "todo");
    box.append(el("h3", null, "What to change"), adviceList(d.advice));
    c.append(box);
  }
  c.append(charts(points, ev));
  // the down box already says what target_down would
  const others = d.findings.filter((f) => f !== main && !(down && f.name === "target_down"));
  if (main || others.length) {
    const fl = el("div", "findings");
    fl.append(el("h3", null, "Findings"));
    if (main) fl.append(findingBlock(main, false));
    for (const f of others) fl.append(findingBlock(f, true));
    c.append(fl);
  }
  return c;
}

// ---- polling ----
async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store", credentials: "same-origin" });
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  const body = await r.json();
  if (body.status !== "success") throw new Error(`${url}: ${body.error || "error"}`);
  return body.data;
}

function mergeHistory(series, full) {
  if (full) history.clear();
  for (const s of series) {
    const key = s.target + "\u0000" + s.model_name;
    const have = history.get(key) || [];
    const lastT = have.length ? have[have.length - 1].t : -Infinity;
    const merged = have.concat(s.points.filter((p) => p.t > lastT));
    history.set(key, merged.slice(-MAX_POINTS));
    for (const p of s.points) if (newestT === null || p.t > newestT) newestT = p.t;
  }
}

function renderSummary(items, status) {
  const counts = {};
  for (const it of items) counts[it.cls] = (counts[it.cls] || 0) + 1;
  const box = document.getElementById("summary");
  box.replaceChildren();
  for (const cls of Object.keys(RANK)) {
    if (!counts[cls]) continue;
    const b = badge(cls);
    b.textContent = `${counts[cls]} ${CLASS_LABEL[cls]}`;
    box.append(b);
  }
  const ev = status.evaluation || {};
  const parts = [ev.ts ? `evaluated ${ago(status.now - ev.ts)} ago` : "no evaluation yet"];
  parts.push(`${status.targets.up}/${status.targets.total} targets up`, `kvdoctor ${status.version}`);
  document.getElementById("meta").textContent = parts.join(" · ");
}

function banner(text) {
  const b = document.getElementById("banner");
  b.hidden = !text;
  b.textContent = text || "";
}

async function poll() {
  try {
    if (FIELDS === null) await loadFields();
    const [targets, diagnoses, status] = await Promise.all([
      getJSON("api/v1/targets"), getJSON("api/v1/diagnoses"), getJSON("api/v1/status"),
    ]);
    const keys = diagnoses.map((d) => d.target + "\u0000" + d.model_name);
    const full = newestT === null || keys.some((k) => !history.has(k));
    mergeHistory(await getJSON("api/v1/history" + (full ? "" : "?since=" + newestT)), full);
    const stats = new Map(targets.map((t) => [t.name, t]));
    const items = diagnoses.map((d) => ({ d, s: stats.get(d.target) }));
    const seen = new Set(diagnoses.map((d) => d.target));
    for (const t of targets) if (!seen.has(t.name)) items.push({ d: null, s: t });
    for (const it of items) it.cls = it.s && it.s.up === false ? "down" : it.d ? it.d.bottleneck : "unknown";
    items.sort((a, b) => (RANK[a.cls] ?? 9) - (RANK[b.cls] ?? 9) ||
      (a.d ? a.d.target : a.s.name).localeCompare(b.d ? b.d.target : b.s.name));
    const main = document.getElementById("targets");
    const frag = document.createDocumentFragment();
    for (const it of items) {
      const key = it.d ? it.d.target + "\u0000" + it.d.model_name : "";
      frag.append(card(it.d, it.s, history.get(key) || [], status.now));
    }
    if (!items.length) frag.append(el("p", "empty", "No targets configured yet."));
    main.replaceChildren(frag);
    renderSummary(items, status);
    const reload = status.reload || {};
    const disk = Object.entries(status.storage || {}).filter(([k, v]) => k !== "problem" && v.failing_since)
      .map(([k, v]) => `${k} file ${v.path || ""} cannot be written since ${ago(status.now - v.failing_since)} ago `
        + `(${v.error || v.write_error}); running from memory`);
    banner([reload.ok === false ? `Config reload failed, still running the last good config: ${reload.error}` : "",
      ...disk].filter(Boolean).join(" · "));
    document.body.classList.remove("stale");
  } catch (err) {
    banner(`Cannot reach kvdoctor (${err.message}); retrying every ${POLL_MS / 1000} s`);
    document.body.classList.add("stale");
  }
}

poll();
setInterval(poll, POLL_MS);
