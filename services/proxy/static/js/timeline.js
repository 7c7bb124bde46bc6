// Renders timeline items (timeline_model.js) into #timeline. Collapsible parts remember being opened.
// Images (attachments, tools' image results) show as thumbnails (js/images.js).
import { el, fmtTime, pretty } from "./dom.js";

const opened = new Set();
const FAILURE_BADGES = { aborted: "aborted", contentFilter: "content filter", budget: "budget" };
const fmtBytes = (n) => (n >= 1024 ? `${(n / 1024).toFixed(1)} KB` : `${n || 0} B`);

// A click on a summary is remembered at once: the details' "toggle" event comes a task later, and a
// timeline re-rendered in between (every event re-renders it) would build the item closed again.
function collapsible(key, summary, body, { open = false, cls = "" } = {}) {
  const head = el("summary", {}, ...summary);
  const det = el("details", { class: cls, dataset: { key } }, head, body);
  det.open = opened.has(key) || open;
  head.addEventListener("click", () => (det.open ? opened.delete(key) : opened.add(key)));  // before it toggles
  det.addEventListener("toggle", () => (det.open ? opened.add(key) : opened.delete(key)));
  return det;
}

const badge = (text, cls = "") => el("span", { class: `tag ${cls}` }, text);
const who = (label, ts, ...tags) => el("div", { class: "who" }, el("span", { class: "who-label" }, label), ...tags,
  ts ? el("time", {}, fmtTime(ts)) : null);

function toolView(item) {
  const state = item.result ? (item.result.isError ? "error" : "ok") : (item.running ? "running" : "no result");
  const summary = [badge("tool", "tool"), el("code", { class: "tool-name" }, item.name),
    el("span", { class: "tool-brief" }, briefArgs(item.args)), badge(state, `state-${state.replace(" ", "-")}`)];
  const body = el("div", { class: "tool-body" },
    el("h3", {}, "Arguments"), argsView(item.args),
    item.result ? el("h3", {}, item.result.isError ? "Error" : "Result") : null,
    item.result ? el("pre", { tabindex: "0", class: item.result.isError ? "error-text" : "" }, item.result.text) : null);
  return collapsible(item.key, summary, body, { cls: `item tool ${state === "error" ? "is-error" : ""}` });
}

/** Each argument on its own: strings as written (a file's content reads as a file, not a JSON string). */
function argsView(args) {
  const keys = Object.keys(args || {});
  if (!keys.length) return el("p", { class: "muted small" }, "no arguments");
  return el("dl", { class: "args" }, ...keys.flatMap((k) => [el("dt", {}, k),
    el("dd", {}, el("pre", { tabindex: "0" }, typeof args[k] === "string" ? args[k] : pretty(args[k])))]));
}

function briefArgs(args) {
  for (const k of ["path", "name", "doc", "command", "title"]) {
    if (args && typeof args[k] === "string") return args[k].length > 60 ? args[k].slice(0, 60) + "…" : args[k];
  }
  if (args && Array.isArray(args.items)) return `${args.items.length} items`;
  return "";
}

function injectionView(item) {
  const summary = [badge("trusted", "trusted"), badge(item.injection, "kind"),
    item.ref ? el("code", {}, item.ref) : null, el("span", { class: "muted" }, item.source ? `from ${item.source}` : "")];
  return collapsible(item.key, summary, el("pre", { tabindex: "0" }, item.text), { cls: "item injection" });
}

function messageUserView(item) {
  const yieldKind = item.blocking ? "blocking" : "progress";
  const tags = [badge(yieldKind, `yield-${yieldKind}`)];
  if (item.implicit) tags.push(badge("implicit", "implicit"));
  if (item.refusal) tags.push(badge("refusal", "error"));
  return el("div", { class: `item bubble agent message_user ${yieldKind}`, dataset: { key: item.key } },
    who("agent → you", item.ts, ...tags), el("div", { class: "text" }, item.text));
}

function branchView(item) {
  const options = item.options.map((o) => el("li", { class: o.active ? "branch active" : "branch" },
    el("span", { class: "branch-label" }, o.label),
    o.active ? badge("shown", "branch-shown")
      : el("button", { type: "button", class: "switch", dataset: { rewind: o.leaf }, title: "Rewind to this branch's newest entry" }, "switch")));
  return el("div", { class: "item branch-point", role: "group", "aria-label": "branch point", dataset: { key: item.key } },
    badge(`${item.options.length} branches`, "branch"), el("ul", { class: "branches" }, ...options));
}

const VIEWS = {
  user: (item, gallery) => el("div", { class: "item bubble user", dataset: { key: item.key } }, who("you", item.ts,
    el("button", { type: "button", class: "rewind-here", dataset: { rewind: item.key }, title: "Rewind the session to this message (files and tasks too)" }, "rewind here")),
  el("div", { class: "text" }, item.text), gallery ? gallery.thumbs(item.images) : null),
  branch: branchView,
  rewound: (item) => el("div", { class: "item rewound", role: "note", dataset: { key: item.key } }, badge("rewound", "rewound"),
    el("span", { class: "muted" }, item.text)),
  assistant: (item) => el("div", { class: `item bubble agent assistant${item.streaming ? " streaming" : ""}`, dataset: { key: item.key } },
    who(item.streaming ? "agent (streaming…)" : "agent", item.ts), el("div", { class: "text" }, item.text)),
  // The reasoning summary: collapsed, also while it streams (`reasoning_update`).
  thinking: (item) => collapsible(item.key, [badge("thinking"), el("span", { class: "muted" }, item.streaming ? "reasoning (streaming…)" : "reasoning")],
    el("pre", { tabindex: "0" }, item.text), { cls: `item thinking${item.streaming ? " streaming" : ""}` }),
  // A tool call whose arguments are still streaming (`tool_call_progress`): a large write shows it moves.
  toolProgress: (item) => el("div", { class: "item tool-progress", role: "status", dataset: { key: item.key } },
    badge("tool", "tool"), el("code", { class: "tool-name" }, item.name || "tool"),
    el("span", { class: "muted" }, `writing arguments… ${fmtBytes(item.bytes)}`)),
  message_user: messageUserView,
  tool: toolView,
  // The images a tool returned (`read` of a PNG): shown under its call, without opening it.
  toolImages: (item, gallery) => el("div", { class: "item tool-images", dataset: { key: item.key } },
    badge(`${item.images.length} image${item.images.length > 1 ? "s" : ""}`, "images"),
    el("span", { class: "muted small" }, `returned by ${item.name}`), gallery ? gallery.thumbs(item.images) : null),
  injection: injectionView,
  note: (item) => collapsible(item.key, [badge(item.label), el("span", { class: "muted" }, "not trusted")], el("pre", { tabindex: "0" }, item.text), { cls: "item note" }),
  skill: (item) => el("div", { class: `item skill ${item.skillType}`, dataset: { key: item.key } },
    badge("skill", "skill"), el("strong", {}, item.name), badge(item.skillType, `skill-${item.skillType}`),
    el("span", { class: "muted" }, item.preloaded ? "preloaded by the variant" : item.requiredBy ? `required by ${item.requiredBy}` : "activated")),
  compaction: (item) => collapsible(item.key, [badge("compaction", "compaction"),
    el("span", { class: "muted" }, item.phase ? item.phase : `summary of ${item.tokensBefore || "?"} tokens`)],
  el("pre", { tabindex: "0" }, item.text || ""), { cls: "item compaction", open: false }),
  failure: (item) => el("div", { class: "item failure", role: "note", dataset: { key: item.key } },
    badge(FAILURE_BADGES[item.stop] || "failed", "error"), el("span", {}, item.text || `run ${item.stop}`)),
  error: (item) => el("div", { class: "item failure", dataset: { key: item.key } }, badge("error", "error"),
    el("span", {}, item.text), item.ts ? el("time", {}, fmtTime(item.ts)) : null),
};

/** `gallery` (js/images.js) draws the thumbnails of user attachments and of tools' image results. */
export function renderTimeline(container, items, gallery = null) {
  const nearBottom = container.scrollHeight - container.scrollTop - container.clientHeight < 80;
  const nodes = items.map((item) => (VIEWS[item.kind] || VIEWS.note)(item, gallery));
  if (!nodes.length) nodes.push(el("p", { class: "empty" }, "Nothing has happened in this session yet."));
  container.replaceChildren(...nodes);
  if (nearBottom) container.scrollTop = container.scrollHeight;
}
