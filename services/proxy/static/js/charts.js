// Inline SVG pictures drawn here (no library): tokens per model request, and live/dormant/waking over time.
import { el, svg, fmtNum, fmtTime } from "./dom.js";

const W = 420;

function axis(max, h, top) {
  return [svg("line", { x1: 36, x2: W - 4, y1: top + h, y2: top + h, class: "axis" }),
    svg("text", { x: 32, y: top + 8, class: "tick", "text-anchor": "end" }, fmtNum(max)),
    svg("text", { x: 32, y: top + h, class: "tick", "text-anchor": "end" }, "0")];
}

/** Prompt tokens per request, the cached part inside it, and the prefix shared with the previous request. */
function promptChart(points) {
  const h = 110, top = 6, max = Math.max(1, ...points.map((p) => p.prompt));
  const step = (W - 44) / points.length, bw = Math.max(3, Math.min(28, step * 0.7));
  const y = (v) => top + h - (h * v) / max;
  const bars = points.flatMap((p, i) => {
    const x = 40 + i * step + (step - bw) / 2;
    const tip = `request ${i + 1}: ${p.prompt} prompt tokens, ${p.cached} cached, ${p.sharedPrefix} shared with the previous request`;
    return [svg("rect", { x, y: y(p.prompt), width: bw, height: top + h - y(p.prompt), class: "bar prompt chart-bar" }, svg("title", {}, tip)),
      p.cached ? svg("rect", { x, y: y(p.cached), width: bw, height: top + h - y(p.cached), class: "bar cached" }, svg("title", {}, tip)) : null,
      p.sharedPrefix ? svg("line", { x1: x - 1, x2: x + bw + 1, y1: y(p.sharedPrefix), y2: y(p.sharedPrefix), class: "shared" }) : null];
  });
  const label = `Prompt tokens for ${points.length} model requests, from ${points[0].prompt} to ${points[points.length - 1].prompt}; ` +
    `${points.reduce((a, p) => a + p.cached, 0)} cached tokens in total`;
  return svg("svg", { viewBox: `0 0 ${W} ${h + top + 16}`, role: "img", "aria-label": label, class: "chart" },
    ...axis(max, h, top), ...bars,
    svg("text", { x: 40, y: h + top + 14, class: "tick" }, "request 1"),
    svg("text", { x: W - 4, y: h + top + 14, class: "tick", "text-anchor": "end" }, `request ${points.length}`));
}

function outputChart(points) {
  const h = 60, top = 6, max = Math.max(1, ...points.map((p) => p.output));
  const step = (W - 44) / points.length, bw = Math.max(3, Math.min(28, step * 0.7));
  const y = (v) => top + h - (h * v) / max;
  const bars = points.flatMap((p, i) => {
    const x = 40 + i * step + (step - bw) / 2;
    const tip = `request ${i + 1}: ${p.output} output tokens` + (p.reasoning ? `, ${p.reasoning} reasoning` : "");
    return [svg("rect", { x, y: y(p.output), width: bw, height: top + h - y(p.output), class: "bar output chart-bar" }, svg("title", {}, tip)),
      p.reasoning ? svg("rect", { x, y: y(p.reasoning), width: bw, height: top + h - y(p.reasoning), class: "bar reasoning" }) : null];
  });
  const total = points.reduce((a, p) => a + p.output, 0);
  return svg("svg", { viewBox: `0 0 ${W} ${h + top + 4}`, role: "img", "aria-label": `Output tokens per request, ${total} in total`, class: "chart" },
    ...axis(max, h, top), ...bars);
}

const legend = (...entries) => el("ul", { class: "legend" }, ...entries.map(([cls, text]) => el("li", {}, el("span", { class: `swatch ${cls}`, "aria-hidden": "true" }), text)));

export function renderUsage(box, points) {
  if (!points.length) { box.replaceChildren(el("p", { class: "empty" }, "No model request yet.")); return; }
  const sum = (k) => points.reduce((a, p) => a + p[k], 0);
  box.replaceChildren(
    el("p", { class: "small" }, `${points.length} requests · ${fmtNum(sum("prompt"))} prompt · ${fmtNum(sum("cached"))} cached · ${fmtNum(sum("output"))} output tokens`),
    el("h3", {}, "Prompt tokens per request"), promptChart(points),
    legend(["prompt", "prompt tokens"], ["cached", "cached (provider cache hit)"], ["shared", "prefix shared with the previous request"]),
    el("h3", {}, "Output tokens per request"), outputChart(points),
    legend(["output", "output tokens"], ["reasoning", "reasoning tokens"]));
}

/** `spans`: [{ts, status, running}] in time order; drawn from the first to now. */
export function renderStatusTimeline(box, spans, now = Date.now()) {
  if (!spans.length) { box.replaceChildren(el("p", { class: "empty" }, "No status seen yet.")); return; }
  const start = spans[0].ts, total = Math.max(1, now - start), h = 22;
  const x = (t) => 4 + ((W - 8) * (t - start)) / total;
  const rects = spans.map((s, i) => {
    const end = i + 1 < spans.length ? spans[i + 1].ts : now;
    const tip = `${s.status}${s.running ? " (running)" : ""} from ${fmtTime(s.ts)} to ${i + 1 < spans.length ? fmtTime(end) : "now"}`;
    return svg("rect", { x: x(s.ts), y: s.running ? 2 : 5, width: Math.max(1.5, x(end) - x(s.ts)), height: s.running ? h : h - 6,
      class: `span ${s.status}${s.running ? " running" : ""}` }, svg("title", {}, tip));
  });
  const label = `Status over ${Math.round(total / 1000)} s: ` + spans.map((s) => s.status + (s.running ? " running" : "")).join(", then ");
  box.replaceChildren(svg("svg", { viewBox: `0 0 ${W} ${h + 18}`, role: "img", "aria-label": label, class: "chart status-chart" }, ...rects,
    svg("text", { x: 4, y: h + 16, class: "tick" }, fmtTime(start)), svg("text", { x: W - 4, y: h + 16, class: "tick", "text-anchor": "end" }, "now")),
  legend(["live", "live"], ["running", "running"], ["waking", "waking"], ["dormant", "dormant"]));
}
