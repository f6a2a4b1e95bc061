// Switchyard operator console: plain DOM, no build step. Every user-provided string goes in through
// text nodes (never innerHTML), since records hold whatever users typed.
"use strict";

const KEY = "switchyard.adminKey";
const SVGNS = "http://www.w3.org/2000/svg";
const COLORS = { gateway: "#2f6fed", context: "#8e44ad", safety_in: "#e67e22", router: "#16a085",
  tools: "#c0392b", inference: "#27ae60", safety_out: "#d35400", logger: "#7f8c8d" };
const view = document.getElementById("view");

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    // Through the CSSOM: the content security policy refuses a `style` attribute.
    else if (k === "style") el.style.cssText = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined && kid !== false)
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return el;
}
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined)
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return el;
}
const fmt = {
  ms: (v) => (v === null || v === undefined ? "–" : v < 1000 ? `${v.toFixed(v < 10 ? 1 : 0)} ms` : `${(v / 1000).toFixed(2)} s`),
  n: (v) => (v === null || v === undefined ? "–" : String(v)),
  pct: (v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(1)}%`),
  time: (ms) => (ms ? new Date(ms).toLocaleTimeString() : "–"),
  datetime: (ms) => (ms ? new Date(ms).toLocaleString() : "–"),
};
const badge = (v) => h("span", { class: `badge ${v || ""}` }, v || "–");
const text = (v) => (typeof v === "string" ? v : v === null || v === undefined ? "" : JSON.stringify(v, null, 2));
const pre = (v, attrs) => h("pre", attrs || {}, text(v));
const kv = (k, v) => h("div", { class: "kv" }, h("b", {}, k), v instanceof Node ? v : String(v ?? "–"));
function toast(msg) {
  const t = document.getElementById("toast");
  t.textContent = msg; t.hidden = false;
  clearTimeout(toast.timer); toast.timer = setTimeout(() => (t.hidden = true), 4000);
}

// ---- API ------------------------------------------------------------------------------------
function adminKey() { return localStorage.getItem(KEY) || ""; }
async function api(path, opts = {}) {
  const r = await fetch(path, { ...opts, headers: { Authorization: `Bearer ${adminKey()}`,
    "content-type": "application/json", ...(opts.headers || {}) } });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error((body.error && body.error.message) || `HTTP ${r.status}`);
  return body;
}

// ---- Requests list ----------------------------------------------------------------------------
const FILTERS = [
  ["tenant", "text"], ["status", ["", "complete", "stopped", "error", "running"]], ["model", "text"],
  ["mode", ["", "fast", "reasoning"]], ["safety_action", ["", "allow", "flag", "block"]],
  ["api", ["", "chat", "openai", "anthropic", "replay"]], ["replays", ["", "false", "true"]],
  ["since", "datetime-local"], ["until", "datetime-local"],
];
function toQuery(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (!v) continue;
    q.set(k, (k === "since" || k === "until") ? String(new Date(v).getTime()) : v);
  }
  return q;
}
async function renderRequests(params) {
  const form = h("form", { class: "filters card", id: "filters" },
    FILTERS.map(([name, kind]) => h("label", {}, name.replace("_", " "),
      Array.isArray(kind)
        ? h("select", { name }, kind.map((o) => h("option", { value: o, selected: params[name] === o }, o || "any")))
        : h("input", { name, type: kind, value: params[name] || "" }))),
    h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const p = Object.fromEntries(new FormData(form).entries());
    location.hash = `#/requests?${new URLSearchParams(Object.entries(p).filter(([, v]) => v))}`;
  });
  const body = h("tbody");
  const table = h("table", { id: "requests" }, h("thead", {}, h("tr", {},
    ["time", "rid", "tenant", "api", "model", "mode", "status", "safety", "TTFT", "TPOT", "prompt", "cached",
      "completion", "duration"].map((c, i) => h("th", { class: i >= 8 ? "num" : "" }, c)))), body);
  const pager = h("div", { class: "pager" });
  view.replaceChildren(form, h("div", { class: "card" }, h("h2", {}, "Requests"), table, pager));
  let cursor = null;
  async function page() {
    const q = toQuery(params); q.set("limit", "50"); if (cursor) q.set("cursor", cursor);
    const got = await api(`/v1/admin/requests?${q}`);
    for (const r of got.items) {
      body.append(h("tr", { class: "req-row", "data-rid": r.rid, onclick: () => (location.hash = `#/r/${r.rid}`) },
        h("td", {}, fmt.time(r.created_ms)), h("td", {}, h("code", {}, r.rid.slice(0, 12)),
          r.replay_of ? h("span", { class: "badge" }, "replay") : null),
        h("td", {}, r.tenant), h("td", {}, r.api || "–"), h("td", {}, r.model || "–"), h("td", {}, r.mode || "–"),
        h("td", {}, badge(r.status)), h("td", {}, r.safety_action ? badge(r.safety_action) : "–"),
        h("td", { class: "num" }, fmt.ms(r.ttft_ms)), h("td", { class: "num" }, fmt.ms(r.tpot_ms)),
        h("td", { class: "num" }, fmt.n(r.prompt_tokens)), h("td", { class: "num" }, fmt.n(r.cached_tokens)),
        h("td", { class: "num" }, fmt.n(r.completion_tokens)), h("td", { class: "num" }, fmt.ms(r.latency_ms))));
    }
    if (!got.items.length && !cursor) body.append(h("tr", {}, h("td", { colspan: 14, class: "muted" }, "No requests match.")));
    cursor = got.next_cursor;
    pager.replaceChildren(cursor ? h("button", { class: "secondary", onclick: page }, "More") : h("span", { class: "muted" }, "end"));
  }
  await page();
}

// ---- One request --------------------------------------------------------------------------------
function waterfall(spans) {
  if (!spans.length) return h("p", { class: "muted" }, "No spans stored for this trace yet.");
  const t0 = Math.min(...spans.map((x) => x.start_ns)), t1 = Math.max(...spans.map((x) => x.end_ns));
  const total = Math.max(t1 - t0, 1), W = 1100, label = 300, row = 20, plot = W - label - 70;
  const svg = s("svg", { class: "waterfall", id: "waterfall", width: "100%", viewBox: `0 0 ${W} ${spans.length * row + 30}` });
  for (let i = 0; i <= 4; i++) {
    const x = label + (plot * i) / 4;
    svg.append(s("line", { x1: x, x2: x, y1: 0, y2: spans.length * row + 6, stroke: "#e3e6ec" }),
      s("text", { x, y: spans.length * row + 20, "text-anchor": "middle" }, fmt.ms((total * i) / 4 / 1e6)));
  }
  spans.forEach((sp, i) => {
    const x = label + ((sp.start_ns - t0) / total) * plot, w = Math.max(((sp.end_ns - sp.start_ns) / total) * plot, 2);
    const y = i * row + 3, dur = (sp.end_ns - sp.start_ns) / 1e6;
    svg.append(s("text", { x: 4, y: y + 12, class: "wf-label" }, `${sp.service} · ${sp.name}`.slice(0, 46)));
    svg.append(s("rect", { class: "wf-bar", "data-service": sp.service, x, y, width: w, height: row - 6, rx: 2,
      fill: COLORS[sp.service] || "#95a5a6", opacity: sp.status === "error" ? 1 : 0.85,
      stroke: sp.status === "error" ? "#d64545" : null },
      s("title", {}, `${sp.service}: ${sp.name}\n${dur.toFixed(2)} ms\n${JSON.stringify(sp.attributes, null, 1)}`)));
    svg.append(s("text", { x: Math.min(x + w + 4, W - 66), y: y + 12 }, fmt.ms(dur)));
    for (const ev of sp.events || []) {
      const ex = label + ((ev.time_ns - t0) / total) * plot;
      svg.append(s("circle", { class: "wf-event", cx: ex, cy: y + (row - 6) / 2, r: 3, fill: "#141a26" }, s("title", {}, ev.name)));
    }
  });
  const services = [...new Set(spans.map((x) => x.service))];
  return h("div", {}, h("div", { class: "legend" }, services.map((sv) => h("span", {},
    h("i", { style: `background:${COLORS[sv] || "#95a5a6"}` }), sv))), svg);
}
function stagesTable(stages) {
  const order = ["gateway", "context", "safety_in", "router", "tools", "inference", "safety_out"];
  const names = Object.keys(stages || {}).sort((a, b) => order.indexOf(a) - order.indexOf(b));
  return h("table", { class: "stages", id: "stages" }, h("thead", {}, h("tr", {},
    ["stage", "status", "replica", "started", "duration", "decision"].map((c) => h("th", {}, c)))),
    h("tbody", {}, names.map((n) => { const st = stages[n]; return h("tr", { "data-stage": n },
      h("td", {}, h("b", {}, n)), h("td", {}, badge(st.status)), h("td", {}, st.replica),
      h("td", {}, fmt.time(st.started_ms)), h("td", { class: "num" }, fmt.ms(st.duration_ms)),
      h("td", {}, pre(st.error ? { ...st.decision, error: st.error } : st.decision))); })));
}
function replayForm(rid) {
  const inputs = { temperature: h("input", { type: "number", step: "0.1", min: 0, max: 2, placeholder: "as logged", style: "width:100px" }),
    seed: h("input", { type: "number", placeholder: "as logged", style: "width:110px" }),
    max_tokens: h("input", { type: "number", min: 1, placeholder: "as logged", style: "width:100px" }),
    mode: h("select", {}, ["", "fast", "reasoning"].map((o) => h("option", { value: o }, o || "as logged"))) };
  const out = h("div", { id: "replay-result" });
  async function go(mode) {
    const overrides = {};
    for (const [k, el] of Object.entries(inputs)) if (el.value !== "") overrides[k] = k === "mode" ? el.value : Number(el.value);
    out.replaceChildren(h("p", { class: "muted" }, `replaying (${mode})…`));
    try {
      const r = await api(`/v1/admin/replay/${rid}`, { method: "POST", body: JSON.stringify({ mode, overrides }) });
      out.replaceChildren(h("p", {}, r.matched ? badge("complete") : badge("error"), " ",
        r.matched ? "output matched token for token" : "output differs", " · ",
        h("a", { href: `#/compare/${rid}/${r.rid}` }, "side by side"), " · ", h("a", { href: `#/r/${r.rid}` }, "replay record")),
      r.matched ? null : pre(r.diff || "(no diff)"));
    } catch (e) { out.replaceChildren(h("p", { class: "muted" }, `replay failed: ${e.message}`)); }
  }
  return h("div", { class: "card" }, h("h2", {}, "Replay"), h("div", { class: "row" },
    Object.entries(inputs).map(([k, el]) => h("label", { class: "muted" }, `${k} `, el)),
    h("button", { id: "replay-inference", onclick: () => go("inference") }, "Replay inference"),
    h("button", { id: "replay-pipeline", class: "secondary", onclick: () => go("pipeline") }, "Replay pipeline")), out);
}
// Input verdicts with the bar each was judged against: a flag below its block bar was borderline and let through.
function verdictTable(verdicts) {
  return h("table", { id: "safety-verdicts" }, h("thead", {}, h("tr", {}, ["category", "action", "score", "blocks at", "source", "by", "detail"].map((c) => h("th", {}, c)))),
    h("tbody", {}, verdicts.map((v) => h("tr", { "data-category": v.category, "data-action": v.action },
      h("td", {}, v.category), h("td", {}, badge(v.action)), h("td", { class: "num" }, Number(v.score).toFixed(3)),
      h("td", { class: "num" }, v.block_at == null ? "–" : Number(v.block_at).toFixed(3)), h("td", {}, v.source || "user"),
      h("td", {}, v.classifier), h("td", {}, v.detail || "")))));
}
async function renderRequest(rid) {
  view.replaceChildren(h("p", { class: "muted" }, "loading…"));
  const got = await api(`/v1/admin/requests/${encodeURIComponent(rid)}`);
  const r = got.record, u = r.usage || {}, req = r.request || {};
  const verdicts = r.safety_in || [];
  const summary = h("div", { class: "card", id: "summary" }, h("h2", {}, "Request ", h("code", {}, rid)),
    h("div", { class: "grid" }, kv("status", badge(r.status)), kv("api", r.api), kv("tenant", r.tenant),
      kv("model", r.model), kv("mode", r.mode), kv("finish", r.finish_reason), kv("safety", r.safety_action ? badge(r.safety_action) : "–"),
      kv("TTFT", fmt.ms(r.ttft_ms)), kv("TPOT", fmt.ms(r.tpot_ms)), kv("prompt tokens", fmt.n(u.prompt_tokens)),
      kv("cached tokens", fmt.n(u.cached_tokens)), kv("completion tokens", fmt.n(u.completion_tokens)),
      kv("duration", fmt.ms(r.latency_ms)), kv("created", fmt.datetime(r.created_ms)), kv("trace", h("code", {}, r.trace_id || "–")),
      r.route && r.route.fallback_from ? kv("asked for", `${r.route.fallback_from} (fallback)`) : null,
      r.replay_of ? kv("replay of", h("a", { href: `#/r/${r.replay_of}` }, r.replay_of.slice(0, 12))) : null,
      r.replay_of ? kv("compare", h("a", { href: `#/compare/${r.replay_of}/${rid}` }, "side by side")) : null));
  const replays = (r.replays || []).length ? h("div", { class: "card", id: "replays" }, h("h2", {}, "Replays"),
    h("ul", {}, r.replays.map((x) => h("li", {}, h("a", { href: `#/compare/${rid}/${x.rid}` }, x.rid.slice(0, 12)), " ",
      badge(x.status), ` ${fmt.datetime(x.created_ms)}`)))) : null;
  view.replaceChildren(...[summary, replays,
    h("div", { class: "card" }, h("h2", {}, "Waterfall"), waterfall(got.spans || [])),
    h("div", { class: "cols" },
      h("div", { class: "card" }, h("h2", {}, "Request"), pre(req.text, { id: "request-text" }),
        (req.messages || []).length ? [h("h3", {}, "client messages"), pre(req.messages)] : null,
        h("h3", {}, "sampling"), pre(r.sampling || req.sampling)),
      h("div", { class: "card" }, h("h2", {}, "Output"), pre(r.released ?? r.output, { id: "output" }),
        r.raw_output !== undefined && r.raw_output !== r.released ? [h("h3", {}, "raw model output"), pre(r.raw_output)] : null,
        r.thinking ? [h("h3", {}, "thinking"), pre(r.thinking)] : null,
        r.error ? [h("h3", {}, "error"), pre(r.error)] : null)),
    h("div", { class: "card" }, h("h2", {}, "Assembled prompt"), pre(r.prompt, { id: "prompt" })),
    h("div", { class: "card" }, h("h2", {}, "Stages"), stagesTable(r.stages)),
    h("div", { class: "cols" },
      h("div", { class: "card" }, h("h2", {}, "Safety"), verdicts.length ? verdictTable(verdicts) : h("p", { class: "muted" }, "no input verdicts"),
        r.safety_out ? [h("h3", {}, "output"), pre(r.safety_out)] : null),
      h("div", { class: "card" }, h("h2", {}, "Route and tools"), pre(r.route || "no route"),
        h("h3", {}, "tool calls"), (r.tools || []).length ? pre(r.tools, { id: "tools" }) : h("p", { class: "muted" }, "none"))),
    (r.feedback || []).length ? h("div", { class: "card" }, h("h2", {}, "Feedback"), pre(r.feedback)) : null,
    r.status ? replayForm(rid) : null].filter(Boolean));
}

// ---- Side by side ---------------------------------------------------------------------------------
function wordDiff(a, b) {
  const A = a.match(/\S+\s*|\s+/g) || [], B = b.match(/\S+\s*|\s+/g) || [];
  if (A.length * B.length > 4e6) return [{ op: "replace", a, b }];
  const L = Array.from({ length: A.length + 1 }, () => new Int32Array(B.length + 1));
  for (let i = A.length - 1; i >= 0; i--) for (let j = B.length - 1; j >= 0; j--)
    L[i][j] = A[i] === B[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = []; let i = 0, j = 0;
  while (i < A.length || j < B.length) {
    if (i < A.length && j < B.length && A[i] === B[j]) { out.push({ op: "equal", a: A[i], b: B[j] }); i++; j++; }
    else if (j < B.length && (i >= A.length || L[i][j + 1] >= L[i + 1][j])) { out.push({ op: "insert", a: "", b: B[j] }); j++; }
    else { out.push({ op: "delete", a: A[i], b: "" }); i++; }
  }
  return out;
}
async function renderCompare(a, b) {
  const [ra, rb] = await Promise.all([api(`/v1/admin/requests/${a}`), api(`/v1/admin/requests/${b}`)]);
  const oa = ra.record.raw_output ?? ra.record.output ?? "", ob = rb.record.raw_output ?? rb.record.output ?? "";
  const segs = wordDiff(oa, ob);
  const side = (rec, which) => h("div", { class: "card", "data-side": which },
    h("h2", {}, which === "a" ? "Original " : "Replay ", h("a", { href: `#/r/${rec.rid}` }, h("code", {}, rec.rid.slice(0, 12)))),
    h("div", { class: "grid" }, kv("status", badge(rec.record.status)), kv("model", rec.record.model), kv("mode", rec.record.mode),
      kv("TTFT", fmt.ms(rec.record.ttft_ms)), kv("TPOT", fmt.ms(rec.record.tpot_ms)),
      kv("tokens", `${fmt.n((rec.record.usage || {}).prompt_tokens)} → ${fmt.n((rec.record.usage || {}).completion_tokens)}`),
      kv("sampling", h("code", {}, JSON.stringify(rec.record.sampling || {})))),
    h("h3", {}, "output"),
    h("pre", { class: "compare-output" }, segs.map((x) => x.op === "equal" ? (which === "a" ? x.a : x.b)
      : which === "a" ? (x.a ? h("span", { class: "diff-del" }, x.a) : null) : (x.b ? h("span", { class: "diff-ins" }, x.b) : null))));
  const same = oa === ob;
  view.replaceChildren(h("div", { class: "card", id: "compare-verdict" }, h("h2", {}, same ? "Outputs match token for token" : "Outputs differ"),
    h("p", { class: "muted" }, `replay mode: ${rb.record.replay_mode || "–"} · overrides: ${JSON.stringify(rb.record.overrides || {})}`)),
  h("div", { class: "cols", id: "compare" }, side(ra, "a"), side(rb, "b")));
}

// ---- Dashboard ----------------------------------------------------------------------------------
function chart(name, title, buckets, series, opts = {}) {
  const W = 520, H = 190, L = 48, R = 10, T = 10, B = 24, pw = W - L - R, ph = H - T - B;
  const vals = series.flatMap((sr) => buckets.map((bk) => sr.get(bk)).filter((v) => v !== null && v !== undefined));
  const max = opts.max ?? Math.max(1e-9, ...vals) * 1.1;
  const svg = s("svg", { class: "chart", "data-chart": name, viewBox: `0 0 ${W} ${H}`, width: "100%" });
  for (let i = 0; i <= 4; i++) {
    const y = T + ph - (ph * i) / 4;
    svg.append(s("line", { x1: L, x2: W - R, y1: y, y2: y, stroke: "#eceef2" }),
      s("text", { x: L - 4, y: y + 4, "text-anchor": "end" }, (opts.fmt || ((v) => v.toFixed(v < 10 ? 1 : 0)))((max * i) / 4)));
  }
  const n = Math.max(buckets.length, 1), bw = pw / n;
  [0, Math.floor(n / 2), n - 1].forEach((i) => buckets[i] && svg.append(
    s("text", { x: L + bw * (i + 0.5), y: H - 6, "text-anchor": "middle" }, fmt.time(buckets[i].start_ms))));
  series.forEach((sr, si) => {
    if (sr.kind === "bar") {
      buckets.forEach((bk, i) => {
        const base = (sr.stackOn ? sr.stackOn.get(bk) || 0 : 0), v = sr.get(bk) || 0;
        if (!v) return;
        const y0 = T + ph - (base / max) * ph, hgt = (v / max) * ph;
        svg.append(s("rect", { x: L + bw * i + 1, y: y0 - hgt, width: Math.max(bw - 2, 1), height: hgt, fill: sr.color },
          s("title", {}, `${sr.label}: ${v}`)));
      });
    } else {
      const pts = buckets.map((bk, i) => [L + bw * (i + 0.5), sr.get(bk)]).filter(([, v]) => v !== null && v !== undefined);
      if (pts.length) svg.append(s("polyline", { fill: "none", stroke: sr.color, "stroke-width": 2,
        points: pts.map(([x, v]) => `${x},${T + ph - (v / max) * ph}`).join(" ") }));
      pts.forEach(([x, v]) => svg.append(s("circle", { cx: x, cy: T + ph - (v / max) * ph, r: 2.5, fill: sr.color }, s("title", {}, `${sr.label}: ${v}`))));
    }
  });
  return h("div", { class: "card" }, h("h2", {}, title), h("div", { class: "legend" },
    series.map((sr) => h("span", {}, h("i", { style: `background:${sr.color}` }), sr.label))), svg);
}
async function renderDashboard(params) {
  const windowSel = h("select", { id: "window" }, ["15m", "1h", "6h", "24h", "7d"].map((w) =>
    h("option", { value: w, selected: (params.window || "1h") === w }, w)));
  windowSel.addEventListener("change", () => (location.hash = `#/dashboard?window=${windowSel.value}`));
  const st = await api(`/v1/admin/stats?window=${params.window || "1h"}`);
  const b = st.buckets, t = st.total, perMin = st.bucket_s / 60;
  view.replaceChildren(
    h("div", { class: "card" }, h("div", { class: "row" }, h("h2", { style: "margin:0" }, "Dashboard"), windowSel,
      h("span", { class: "muted" }, `buckets of ${st.bucket_s}s`)),
      h("div", { class: "grid", id: "totals", style: "margin-top:10px" }, kv("requests", t.requests),
        kv("requests / min", st.requests_per_minute.toFixed(2)), kv("errors", t.errors), kv("blocks", t.blocks),
        kv("TTFT p50 / p95", `${fmt.ms(t.ttft_p50_ms)} / ${fmt.ms(t.ttft_p95_ms)}`),
        kv("TPOT p50 / p95", `${fmt.ms(t.tpot_p50_ms)} / ${fmt.ms(t.tpot_p95_ms)}`), kv("prefix-cache hit rate", fmt.pct(t.cache_hit_rate)))),
    h("div", { class: "charts" },
      chart("rpm", "Requests per minute", b, [{ kind: "bar", label: "requests/min", color: "#2f6fed", get: (x) => x.requests / perMin }]),
      chart("ttft", "TTFT percentiles (ms)", b, [{ label: "p50", color: "#27ae60", get: (x) => x.ttft_p50_ms },
        { label: "p95", color: "#c0392b", get: (x) => x.ttft_p95_ms }]),
      chart("tpot", "TPOT percentiles (ms)", b, [{ label: "p50", color: "#27ae60", get: (x) => x.tpot_p50_ms },
        { label: "p95", color: "#c0392b", get: (x) => x.tpot_p95_ms }]),
      chart("cache", "Prefix-cache hit rate", b, [{ label: "cached / prompt tokens", color: "#8e44ad", get: (x) => x.cache_hit_rate }],
        { max: 1, fmt: (v) => `${Math.round(v * 100)}%` }),
      chart("errors", "Errors and blocks", b, (() => { const errs = { kind: "bar", label: "errors", color: "#d64545", get: (x) => x.errors };
        return [errs, { kind: "bar", label: "blocks", color: "#d99a1e", get: (x) => x.blocks, stackOn: errs }]; })(),
        { max: Math.max(1, ...b.map((x) => x.errors + x.blocks)) * 1.1 })));
}

// ---- Key standing --------------------------------------------------------------------------------
// Keys the abuse monitor counted against: suspended ones with the reason and the requests that
// caused it (each links to its record), active ones with the strikes in the current window.
function strikeList(strikes) {
  if (!(strikes || []).length) return h("span", { class: "muted" }, "none");
  return h("ul", { class: "strikes" }, strikes.map((st) => h("li", { "data-rid": st.rid },
    h("a", { class: "strike", href: `#/r/${st.rid}` }, h("code", {}, st.rid.slice(0, 12))), " ", badge(st.action),
    (st.categories || []).length ? ` ${st.categories.join(", ")}` : "", h("span", { class: "muted" }, ` ${fmt.time(st.at_ms)}`))));
}
async function standingCard() {
  const got = await api("/v1/admin/keys/standing");
  const body = h("tbody");
  for (const k of got.data) {
    const reinstate = async () => {
      try { await api(`/v1/admin/keys/${encodeURIComponent(k.key_id)}/reinstate`, { method: "POST" }); toast(`key ${k.key_id} reinstated`); }
      catch (e) { toast(`reinstate failed: ${e.message}`); }
      route();
    };
    body.append(h("tr", { class: "key-row", "data-key": k.key_id, "data-state": k.state },
      h("td", {}, h("code", {}, k.key_id)), h("td", {}, h("span", { class: `badge ${k.state === "suspended" ? "block" : "ok"}` }, k.state)),
      h("td", {}, fmt.datetime(k.since_ms)), h("td", { class: "num" }, fmt.n(k.blocked)), h("td", { class: "num" }, fmt.n(k.flagged)),
      h("td", { class: "reason" }, k.reason || "–"), h("td", {}, strikeList(k.strikes)),
      h("td", {}, k.state === "suspended" ? h("button", { class: "secondary reinstate", onclick: reinstate }, "Reinstate") : null)));
  }
  if (!got.data.length) body.append(h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No key has been blocked or flagged.")));
  return h("div", { class: "card" }, h("h2", {}, "Key standing"),
    h("p", { class: "muted" }, "A key is suspended after enough strikes in the window, as its tenant's strike policy says: confident blocks only; a flag (a borderline score) is never a strike."),
    h("table", { id: "keys" }, h("thead", {}, h("tr", {}, ["key", "state", "since", "blocked", "flagged", "reason", "requests", ""]
      .map((c, i) => h("th", { class: i === 3 || i === 4 ? "num" : "" }, c)))), body));
}


// ---- API keys ----------------------------------------------------------------------------------------
// Over /v1/admin/keys, as any client would. A secret (create, rotate) is shown once, in #new-secret,
// until the operator leaves the page; the list never holds one.
let shownSecret = null;
const budgetText = (k) => `${k.budget_tokens_per_day ?? "–"} / ${k.budget_tokens_per_month ?? "–"}`;
function secretCard() {
  if (!shownSecret) return null;
  return h("div", { class: "card secret", id: "new-secret" }, h("h2", {}, `${shownSecret.what}: ${shownSecret.id}`),
    h("p", {}, "Copy this key now: it is shown this once and cannot be read again."),
    h("pre", { id: "secret-value" }, shownSecret.key));
}
function createKeyForm() {
  const f = h("form", { class: "filters card", id: "create-key" },
    h("label", {}, "tenant", h("input", { name: "tenant", required: true, maxlength: 128 })),
    h("label", {}, "tier", h("select", { name: "tier" }, ["free", "pro"].map((t) => h("option", { value: t }, t)))),
    h("label", {}, "name", h("input", { name: "name", maxlength: 128 })),
    h("label", {}, "models (comma-separated; empty: all)", h("input", { name: "models" })),
    h("label", {}, "tokens / day", h("input", { name: "budget_tokens_per_day", type: "number", min: 1 })),
    h("label", {}, "tokens / month", h("input", { name: "budget_tokens_per_month", type: "number", min: 1 })),
    h("label", {}, "expires", h("input", { name: "expires_at", type: "datetime-local" })),
    h("button", { type: "submit" }, "Create key"));
  f.addEventListener("submit", async (e) => {
    e.preventDefault();
    const v = Object.fromEntries(new FormData(f).entries()), body = { tenant: v.tenant, tier: v.tier, name: v.name };
    const models = (v.models || "").split(",").map((m) => m.trim()).filter(Boolean);
    if (models.length) body.models = models;
    for (const b of ["budget_tokens_per_day", "budget_tokens_per_month"]) if (v[b]) body[b] = Number(v[b]);
    if (v.expires_at) body.expires_at = new Date(v.expires_at).getTime();
    try {
      const k = await api("/v1/admin/keys", { method: "POST", body: JSON.stringify(body) });
      shownSecret = { id: k.id, key: k.key, what: "New key" };
      toast(`key ${k.id} created`);
    } catch (err) { toast(`create failed: ${err.message}`); return; }
    route();
  });
  return f;
}
async function keyAction(k, action) {
  if (action === "revoke" && !confirm(`Revoke ${k.id}? Every gateway refuses it at once.`)) return;
  try {
    const got = await api(`/v1/admin/keys/${encodeURIComponent(k.id)}/${action}`, { method: "POST" });
    if (action === "rotate") shownSecret = { id: k.id, key: got.key, what: "Rotated key (the old one no longer works)" };
    toast(`key ${k.id} ${action === "rotate" ? "rotated" : "revoked"}`);
  } catch (e) { toast(`${action} failed: ${e.message}`); }
  route();
}
async function renderKeys(params) {
  const q = params.tenant ? `?tenant=${encodeURIComponent(params.tenant)}` : "";
  const [got, standing] = await Promise.all([api(`/v1/admin/keys${q}`), standingCard()]);
  const filter = h("form", { class: "row", id: "key-filter" }, h("input", { name: "tenant", placeholder: "tenant", value: params.tenant || "" }),
    h("button", { type: "submit", class: "secondary" }, "Filter"));
  filter.addEventListener("submit", (e) => {
    e.preventDefault(); const t = new FormData(filter).get("tenant");
    location.hash = t ? `#/keys?tenant=${encodeURIComponent(t)}` : "#/keys";
  });
  const body = h("tbody");
  for (const k of got.data) {
    const live = k.state === "active";
    body.append(h("tr", { class: "api-key-row", "data-key": k.id, "data-state": k.state },
      h("td", {}, h("a", { href: `#/keys/${k.id}` }, h("code", {}, k.id)), h("br"), h("code", { class: "muted" }, `${k.prefix}…`)),
      h("td", {}, k.name || "–"), h("td", {}, k.tenant), h("td", {}, k.tier, k.admin ? " (admin)" : ""),
      h("td", {}, k.models ? k.models.join(", ") : "all"), h("td", { class: "num" }, budgetText(k)),
      h("td", {}, k.expires_at || "never"), h("td", {}, h("span", { class: `badge ${live ? "ok" : "block"}` }, k.state)),
      h("td", {}, k.created_at || "–"),
      h("td", {}, h("a", { class: "usage", href: `#/keys/${k.id}` }, "Usage"), " ",
        live ? h("button", { class: "secondary rotate", onclick: () => keyAction(k, "rotate") }, "Rotate") : null, " ",
        live ? h("button", { class: "secondary revoke", onclick: () => keyAction(k, "revoke") }, "Revoke") : null)));
  }
  if (!got.data.length) body.append(h("tr", {}, h("td", { colspan: 10, class: "muted" }, "No keys.")));
  view.replaceChildren(...[secretCard(), createKeyForm(),
    h("div", { class: "card" }, h("div", { class: "row" }, h("h2", { style: "margin:0" }, "API keys"), filter),
      h("table", { id: "api-keys" }, h("thead", {}, h("tr", {}, ["key", "name", "tenant", "tier", "models",
        "budget day / month", "expires", "state", "created", ""].map((c) => h("th", {}, c)))), body)),
    standing].filter(Boolean));
}
function usageTable(id, first, rows) {
  return h("table", { id }, h("thead", {}, h("tr", {}, [first, "requests", "prompt tokens", "completion tokens", "total"]
    .map((c, i) => h("th", { class: i ? "num" : "" }, c)))),
  h("tbody", {}, rows.map((r) => h("tr", { "data-row": r[first] }, h("td", {}, r[first] || "–"),
    ["requests", "prompt_tokens", "completion_tokens", "total_tokens"].map((f) => h("td", { class: "num" }, fmt.n(r[f])))))));
}
async function renderKeyUsage(id) {
  const [k, u] = await Promise.all([api(`/v1/admin/keys/${encodeURIComponent(id)}`),
    api(`/v1/admin/keys/${encodeURIComponent(id)}/usage`)]);
  const t = u.total;
  view.replaceChildren(h("div", { class: "card", id: "key-usage" },
    h("h2", {}, "Usage of ", h("code", {}, k.id), k.name ? ` (${k.name})` : ""),
    h("p", { class: "muted" }, `from the request records, ${u.since_at} to ${u.until_at}`),
    h("div", { class: "grid", id: "usage-total" }, kv("requests", t.requests), kv("prompt tokens", t.prompt_tokens),
      kv("completion tokens", t.completion_tokens), kv("total tokens", t.total_tokens), kv("state", k.state),
      Object.entries(u.budgets).map(([p, b]) => kv(`budget per ${p}`, `${b.spent} of ${b.limit} (resets ${b.resets_at})`)))),
  h("div", { class: "cols" }, h("div", { class: "card" }, h("h2", {}, "By model"), usageTable("usage-by-model", "model", u.by_model)),
    h("div", { class: "card" }, h("h2", {}, "By day (UTC)"), usageTable("usage-by-day", "day", u.by_day))),
  h("p", {}, h("a", { href: "#/keys" }, "← all keys")));
}

// ---- Models (added and removed at run time: POST/DELETE /v1/admin/models) -------------------------------
function addModelForm() {
  const f = h("form", { class: "filters card", id: "add-model" },
    h("label", {}, "name", h("input", { name: "name", required: true, maxlength: 128, pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]*" })),
    h("label", {}, "pool", h("input", { name: "pool", required: true, maxlength: 64, pattern: "[A-Za-z0-9_\\-]+" })),
    h("label", {}, "path (GGUF file or checkpoint directory)", h("input", { name: "path", required: true, maxlength: 4096 })),
    h("label", {}, "engine", h("select", { name: "engine" }, ["native", "vllm", "tensorrt_llm", "sim"].map((e) => h("option", { value: e }, e)))),
    h("label", {}, "aliases (comma-separated)", h("input", { name: "aliases" })),
    h("label", {}, "context length", h("input", { name: "context_length", type: "number", min: 1, value: 8192 })),
    h("button", { type: "submit" }, "Add model"));
  f.addEventListener("submit", async (e) => {
    e.preventDefault();
    const v = Object.fromEntries(new FormData(f).entries());
    const body = { name: v.name, pool: v.pool, path: v.path, engine: v.engine, context_length: Number(v.context_length) };
    body.aliases = (v.aliases || "").split(",").map((a) => a.trim()).filter(Boolean);
    toast(`starting ${v.name}: answers once a replica serves`);
    try {
      await api("/v1/admin/models", { method: "POST", body: JSON.stringify(body) });
      toast(`model ${v.name} serves`);
    } catch (err) { toast(`add failed: ${err.message}`); return; }
    route();
  });
  return f;
}
async function removeModel(name) {
  if (!confirm(`Remove ${name}? New requests for it get 404; its streams finish, then its pool stops.`)) return;
  try {
    await api(`/v1/admin/models/${encodeURIComponent(name)}`, { method: "DELETE" });
    toast(`model ${name} removed`);
  } catch (e) { toast(`remove failed: ${e.message}`); }
  route();
}
async function renderModels() {
  const got = await api("/v1/admin/models");
  const body = h("tbody");
  for (const m of got.data) {
    const c = m.card;
    body.append(h("tr", { class: "model-row", "data-model": c.name, "data-state": m.state },
      h("td", {}, h("code", {}, c.name), m.default ? " (default)" : ""), h("td", {}, (c.aliases || []).join(", ") || "–"),
      h("td", {}, h("code", {}, c.pool)), h("td", {}, c.engine), h("td", {}, h("code", {}, c.path || "bundled")),
      h("td", { class: "num" }, fmt.n(c.context_length)),
      h("td", {}, h("span", { class: `badge ${m.state === "serving" ? "ok" : "block"}` }, m.state)),
      h("td", { class: "num" }, String(m.replicas.length)),
      h("td", {}, m.default ? null : h("button", { class: "secondary remove", onclick: () => removeModel(c.name) }, "Remove"))));
  }
  view.replaceChildren(addModelForm(), h("div", { class: "card" }, h("h2", {}, "Models"),
    h("table", { id: "models" }, h("thead", {}, h("tr", {}, ["model", "aliases", "pool", "engine", "path",
      "context", "state", "replicas", ""].map((c) => h("th", {}, c)))), body)));
}

// ---- MCP servers (POST/GET/DELETE /v1/admin/mcp-servers) -----------------------------------------------
const lines = (v) => (v || "").split("\n").map((x) => x.trim()).filter(Boolean);
function pairs(v, sep) {
  const out = {};
  for (const line of lines(v)) { const i = line.indexOf(sep); if (i > 0) out[line.slice(0, i).trim()] = line.slice(i + 1).trim(); }
  return out;
}
function mcpForm(edit) {
  const sp = edit ? edit.spec : { transport: "http", timeout_s: 10, max_result_bytes: 16384, enabled: true, plan: true };
  const f = h("form", { class: "filters card", id: "mcp-form" },
    h("label", {}, "name", h("input", { name: "name", required: true, maxlength: 24, pattern: "[a-z][a-z0-9\\-]*", value: sp.name || "", readonly: !!edit })),
    h("label", {}, "tenant (empty: every tenant)", h("input", { name: "tenant", maxlength: 128, value: sp.tenant || "", readonly: !!edit })),
    h("label", {}, "transport", h("select", { name: "transport" }, ["http", "stdio"].map((t) => h("option", { value: t, selected: sp.transport === t }, t)))),
    h("label", {}, "URL (http)", h("input", { name: "url", maxlength: 2048, value: sp.url || "", placeholder: "https://host/mcp" })),
    h("label", {}, "headers (http; Name: value a line; *** keeps the stored value)",
      h("textarea", { name: "headers", rows: 2 }, Object.entries(sp.headers || {}).map(([k, v]) => `${k}: ${v}`).join("\n"))),
    h("label", {}, "command (stdio; one argument a line)", h("textarea", { name: "command", rows: 2 }, (sp.command || []).join("\n"))),
    h("label", {}, "read-only paths (stdio; one a line)", h("textarea", { name: "read_only_paths", rows: 2 }, (sp.read_only_paths || []).join("\n"))),
    h("label", {}, "env (stdio; NAME=value a line; *** keeps the stored value)",
      h("textarea", { name: "env", rows: 2 }, Object.entries(sp.env || {}).map(([k, v]) => `${k}=${v}`).join("\n"))),
    h("label", {}, "timeout (s)", h("input", { name: "timeout_s", type: "number", min: 0.1, max: 120, step: 0.1, value: sp.timeout_s })),
    h("label", {}, "max result bytes", h("input", { name: "max_result_bytes", type: "number", min: 256, max: 1048576, value: sp.max_result_bytes })),
    h("label", {}, "description", h("input", { name: "description", maxlength: 500, value: sp.description || "" })),
    h("label", {}, h("input", { name: "enabled", type: "checkbox", checked: sp.enabled }), " enabled"),
    h("label", {}, h("input", { name: "plan", type: "checkbox", checked: sp.plan }), " planned before the model writes"),
    h("button", { type: "submit" }, edit ? "Save" : "Register"),
    edit ? h("a", { href: "#/mcp" }, "cancel") : null);
  f.addEventListener("submit", async (e) => {
    e.preventDefault();
    const v = Object.fromEntries(new FormData(f).entries());
    const body = { name: v.name, transport: v.transport, timeout_s: Number(v.timeout_s),
      max_result_bytes: Number(v.max_result_bytes), description: v.description, enabled: !!v.enabled, plan: !!v.plan };
    if (v.tenant) body.tenant = v.tenant;
    if (v.transport === "http") { body.url = v.url; body.headers = pairs(v.headers, ":"); }
    else { body.command = lines(v.command); body.read_only_paths = lines(v.read_only_paths); body.env = pairs(v.env, "="); }
    toast(`registering ${v.name}: waits for its tools to be listed`);
    try {
      const got = await api("/v1/admin/mcp-servers", { method: "POST", body: JSON.stringify(body) });
      toast(`${v.name}: ${got.state}${got.error ? ` (${got.error})` : ""}, ${got.tools.length} tools`);
    } catch (err) { toast(`register failed: ${err.message}`); return; }
    location.hash = "#/mcp"; route();
  });
  return f;
}
async function removeMcp(sv) {
  if (!confirm(`Remove ${sv.spec.name}? Its tools leave every tools replica at once.`)) return;
  const q = sv.spec.tenant ? `?tenant=${encodeURIComponent(sv.spec.tenant)}` : "";
  try {
    await api(`/v1/admin/mcp-servers/${encodeURIComponent(sv.spec.name)}${q}`, { method: "DELETE" });
    toast(`${sv.spec.name} removed`);
  } catch (e) { toast(`remove failed: ${e.message}`); }
  route();
}
async function renderMcp(params) {
  const got = await api("/v1/admin/mcp-servers");
  const editing = got.data.find((sv) => sv.key === params.edit);
  const body = h("tbody");
  for (const sv of got.data) {
    const sp = sv.spec;
    body.append(h("tr", { class: "mcp-row", "data-server": sp.name, "data-state": sv.state },
      h("td", {}, h("code", {}, sp.name)), h("td", {}, sp.tenant || "all"), h("td", {}, sp.transport),
      h("td", {}, h("code", {}, sp.transport === "http" ? sp.url : sp.command.join(" "))),
      h("td", {}, h("span", { class: `badge ${sv.state === "ready" ? "ok" : sv.state === "unknown" ? "" : "block"}` }, sv.state),
        sv.error ? h("div", { class: "muted" }, sv.error) : null),
      h("td", { class: "mcp-tools" }, sv.tools.map((t) => h("div", { title: t.description }, h("code", {}, t.name))),
        sv.skipped.length ? h("div", { class: "muted" }, `skipped: ${sv.skipped.join(", ")}`) : null),
      h("td", { class: "num" }, `${sp.timeout_s} s / ${sp.max_result_bytes} B`),
      h("td", {}, h("a", { class: "edit", href: `#/mcp?edit=${encodeURIComponent(sv.key)}` }, "Edit"), " ",
        h("button", { class: "secondary remove", onclick: () => removeMcp(sv) }, "Remove"))));
  }
  if (!got.data.length) body.append(h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No MCP servers registered.")));
  view.replaceChildren(mcpForm(editing), h("div", { class: "card" }, h("h2", {}, "MCP servers"),
    h("table", { id: "mcp-servers" }, h("thead", {}, h("tr", {}, ["server", "tenant", "transport", "endpoint", "state",
      "tools", "limits", ""].map((c) => h("th", {}, c)))), body)));
}

// ---- Routing --------------------------------------------------------------------------------------
async function route() {
  const [path, query] = (location.hash.slice(1) || "/requests").split("?");
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  const parts = path.split("/").filter(Boolean);
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === parts[0]
    || (a.dataset.nav === "requests" && !["dashboard", "keys", "models", "mcp"].includes(parts[0]))));
  if (!adminKey()) { view.replaceChildren(h("p", { class: "muted" }, "Enter the admin key to begin.")); return; }
  try {
    if (parts[0] === "dashboard") await renderDashboard(params);
    else if (parts[0] === "keys" && parts[1]) await renderKeyUsage(parts[1]);
    else if (parts[0] === "keys") await renderKeys(params);
    else if (parts[0] === "models") await renderModels();
    else if (parts[0] === "mcp") await renderMcp(params);
    else if (parts[0] === "r" && parts[1]) await renderRequest(parts[1]);
    else if (parts[0] === "compare" && parts[2]) await renderCompare(parts[1], parts[2]);
    else await renderRequests(params);
    document.body.dataset.ready = path;
  } catch (e) {
    view.replaceChildren(h("div", { class: "card", id: "error" }, h("h2", {}, "Could not load"), h("p", {}, e.message)));
    document.body.dataset.ready = "error";
  }
}
// A link's `?key=` never replaces the saved key by itself (a link from someone else would have the
// operator act with that person's key): it leaves the address bar and history at once, and the operator
// sees its prefix and chooses.
function offerUrlKey(fromUrl) {
  const box = document.getElementById("url-key");
  document.getElementById("url-key-text").replaceChildren("The link you opened carries an admin key starting with ",
    h("code", {}, `${fromUrl.slice(0, 10)}…`),
    adminKey() ? ". Use it instead of the key saved in this browser?" : ". Use it in this browser?",
    " Only if you trust who sent the link.");
  box.hidden = false;
  const answer = (accepted) => {
    box.hidden = true;
    if (!accepted) return;
    localStorage.setItem(KEY, fromUrl);
    document.getElementById("adminkey").value = fromUrl;
    toast("key saved"); route();
  };
  document.getElementById("url-key-accept").addEventListener("click", () => answer(true), { once: true });
  document.getElementById("url-key-decline").addEventListener("click", () => answer(false), { once: true });
}
(function init() {
  const url = new URL(location.href), fromUrl = (url.searchParams.get("key") || "").trim();
  if (url.searchParams.has("key")) { url.searchParams.delete("key"); history.replaceState(null, "", url); }
  if (fromUrl && fromUrl !== adminKey()) offerUrlKey(fromUrl);
  document.getElementById("adminkey").value = adminKey();
  document.getElementById("keyform").addEventListener("submit", (e) => {
    e.preventDefault(); localStorage.setItem(KEY, document.getElementById("adminkey").value.trim()); toast("key saved"); route();
  });
  window.addEventListener("hashchange", () => { delete document.body.dataset.ready; shownSecret = null; route(); });
  route();
})();
