// The session's spending and its caps (docs/costs.md), from GET /sessions/{id} `spend`: every model
// request priced (agent, subagents, compaction, failed and aborted attempts), and the cap that
// stopped a run (a `budget_reached` event) named until the page reloads.
import { el } from "./dom.js";

const usd = (n) => (n == null ? "no cap" : `$${Number(n).toFixed(4)}`);
const CAPS = { session_usd: "session cap", user_usd: "user cap", run_tokens: "run token cap" };

/** The line a `budget_reached` event adds to the timeline (a failure note). */
export function budgetText(d) {
  return d.message || `${CAPS[d.cap] || d.cap} reached (${d.spent} of ${d.limit})`;
}

export function renderSpend(container, spend, reached) {
  if (!spend) { container.replaceChildren(el("p", { class: "empty" }, "No spending read yet.")); return; }
  const limits = spend.limits || {};
  const rows = [["session", `${usd(spend.usd)} of ${usd(limits.session_usd)}`],
    ["user (all sessions)", `${usd(spend.user_usd)} of ${usd(limits.user_usd)}`],
    ["run token cap", limits.run_tokens == null ? "none" : `${limits.run_tokens} tokens`],
    ["requests", `${spend.requests} (${spend.failed_requests} failed, ${spend.aborted_requests} aborted, ` +
      `${spend.unpriced_requests} unpriced)`],
    ...Object.entries(spend.by_kind || {}).map(([k, t]) => [k, `${usd(t.usd)}, ${t.tokens} tokens`]),
    ...Object.entries(spend.by_model || {}).map(([m, t]) => [`model ${m}`, `${usd(t.usd)}, ${t.requests} requests`])];
  container.replaceChildren(
    ...(reached ? [el("p", { class: "item failure", role: "status" }, `${CAPS[reached.cap] || reached.cap}: ${budgetText(reached)}`)] : []),
    el("dl", { class: "spend" }, ...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
}
