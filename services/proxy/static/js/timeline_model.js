// Turns transcript entries (history) and live events into timeline items. Pure data, no DOM.

const textOf = (content) => typeof content === "string" ? content
  : Array.isArray(content) ? content.filter((p) => p && p.type === "text").map((p) => p.text).join("") : "";
const tsOf = (entry) => Date.parse(entry.timestamp) || 0;

function injectionItem(key, ts, customType, content, details) {
  details = details || {};
  if (details.trusted === true) {
    return { key, ts, kind: "injection", injection: details.injectionType || customType, source: details.source,
             ref: details.ref || details.skill || null, text: content };
  }
  return { key, ts, kind: "note", label: customType || "note", text: content };
}

function assistantItems(entry, m, results, live) {
  const ts = tsOf(entry);
  const out = [];
  const text = textOf(m.content);
  const thinking = (m.content || []).filter((p) => p.type === "thinking").map((p) => p.thinking).join("\n");
  if (thinking.trim()) out.push({ key: `${entry.id}:thinking`, ts, kind: "thinking", text: thinking });
  if (m.implicitMessageUser) {
    out.push({ key: `${entry.id}:implicit`, ts, kind: "message_user", text: m.refusal && !text.trim() ? `The model refused: ${m.refusal}` : text,
               blocking: true, implicit: true, refusal: Boolean(m.refusal) });
  } else if (text.trim()) {
    out.push({ key: `${entry.id}:text`, ts, kind: "assistant", text });
  }
  for (const call of (m.content || []).filter((p) => p.type === "toolCall")) {
    const args = call.arguments || {};
    const result = results.get(call.id) || live.toolEnds.get(call.id) || null;
    if (call.name === "message_user" && !(result && result.isError)) { // refused (audit, not alone): a tool error
      out.push({ key: `${entry.id}:${call.id}`, ts, kind: "message_user", text: String(args.message ?? ""),
                 blocking: Boolean(args.blockOnUser ?? args.block_on_user), implicit: false });
    } else {
      out.push({ key: `${entry.id}:${call.id}`, ts, kind: "tool", name: call.name, args, result,
                 running: !result && live.running });
      if (result && result.images && result.images.length) {
        out.push({ key: `${entry.id}:${call.id}:images`, ts, kind: "toolImages", name: call.name, images: result.images });
      }
    }
  }
  if (m.stopReason === "error" || m.stopReason === "aborted") {
    // a cap that stopped the run (errorKind "budget", docs/costs.md) gets its own badge
    out.push({ key: `${entry.id}:stop`, ts, kind: "failure", stop: m.errorKind === "budget" ? "budget" : m.stopReason,
               text: m.errorMessage || "" });
  } else if (m.stopReason === "contentFilter") { // the provider's filter, never the output limit
    out.push({ key: `${entry.id}:stop`, ts, kind: "failure", stop: m.stopReason,
               text: "The provider's content filter stopped this reply." });
  }
  return out;
}

function messageItems(entry, results, live) {
  const m = entry.message || {};
  const ts = tsOf(entry);
  switch (m.role) {
    case "user": return [{ key: entry.id, ts, kind: "user", text: textOf(m.content), images: m.images || [] }];
    case "assistant": return assistantItems(entry, m, results, live);
    case "custom": return [injectionItem(entry.id, ts, m.customType, textOf(m.content), m.details)];
    case "compactionSummary": return [{ key: entry.id, ts, kind: "compaction", text: m.summary, tokensBefore: m.tokensBefore }];
    default: return []; // toolResult: shown with its call
  }
}

/** What a `history_repair` entry did (shared/history_repair.py), in the reader's words. */
const REPAIRS = {
  strip_reasoning: "earlier reasoning items are no longer sent",
  remove_images: "images replaced by a text stand-in",
  redact: "an item replaced by a note",
};

function entryItems(entry, results, live) {
  const ts = tsOf(entry);
  switch (entry.type) {
    case "message": return messageItems(entry, results, live);
    case "custom_message": return [injectionItem(entry.id, ts, entry.customType, textOf(entry.content), entry.details)];
    case "skill_activation":
      return [{ key: entry.id, ts, kind: "skill", name: entry.name, skillType: entry.skillType,
                requiredBy: entry.requiredBy, preloaded: entry.preloaded }];
    case "skill_end":
      return [{ key: entry.id, ts, kind: "note", label: `skill ended: ${entry.name}`,
                text: entry.reason + (entry.workflow ? ` (${entry.workflow})` : "") }];
    case "compaction":
      return [{ key: entry.id, ts, kind: "compaction", text: entry.summary, tokensBefore: entry.tokensBefore }];
    case "model_change": return [{ key: entry.id, ts, kind: "note", label: "model",
      text: [entry.modelId, entry.reasoningEffort && `effort ${entry.reasoningEffort}`, entry.api].filter(Boolean).join(" · ") }];
    case "audit": return [{ key: entry.id, ts, kind: "note", label: `completion audit: ${entry.workflow}`,
      text: entry.outcome + (entry.missing && entry.missing.length ? ` (missing: ${entry.missing.join(", ")})` : "")
        + (entry.deviations || []).map((d) => `\ndeviation ${d.step}: ${d.cause}`).join("") }];
    case "history_repair": return [{ key: entry.id, ts, kind: "note", label: "history repaired",
      text: `${REPAIRS[entry.action] || entry.action} (the model API refused the replayed history: ${entry.error})` }];
    case "leaf": return entry.note ? [{ key: entry.id, ts, kind: "rewound", text: "The session was rewound to here: "
      + "the entries after it on the previous branch are kept in the tree, the files are as they were here." }] : [];
    default: return [];
  }
}

function toolResults(entries) {
  const results = new Map();
  for (const e of entries) {
    const m = e.type === "message" && e.message;
    if (m && m.role === "toolResult") {
      results.set(m.toolCallId, { text: textOf(m.content), isError: Boolean(m.isError), details: m.details, images: m.images || [] });
    }
  }
  return results;
}

/** The timeline: transcript items, the live-only items (errors, compaction phases) placed by time,
 *  then what is streaming now. */
export function buildItems(entries, live) {
  const results = toolResults(entries);
  const items = entries.flatMap((e) => entryItems(e, results, live));
  for (const extra of live.extras) {
    let at = items.length;
    while (at > 0 && items[at - 1].ts > extra.ts) at--;
    items.splice(at, 0, extra);
  }
  const now = Date.now();
  if (live.streamingReasoning) items.push({ key: "streaming-reasoning", ts: now, kind: "thinking", streaming: true, text: live.streamingReasoning });
  if (live.streamingText) items.push({ key: "streaming", ts: now, kind: "assistant", streaming: true, text: live.streamingText });
  for (const [id, p] of live.toolProgress || []) {
    items.push({ key: `progress-${id}`, ts: now, kind: "toolProgress", name: p.name, bytes: p.bytes });
  }
  return items;
}

/** The live skill contracts: activated and not ended since (a `skill_end` entry ends one). */
export function activeSkills(entries, liveSkills) {
  const skills = new Map();
  for (const e of entries) {
    if (e.type === "skill_activation" && !skills.has(e.name)) skills.set(e.name, { name: e.name, type: e.skillType, requiredBy: e.requiredBy });
    else if (e.type === "skill_end") skills.delete(e.name);
  }
  for (const s of liveSkills) if (!skills.has(s.name)) skills.set(s.name, s);
  return [...skills.values()];
}

export function documentIds(entries) {
  const docs = new Set();
  for (const e of entries) {
    const m = e.type === "message" && e.message;
    if (m && m.role === "assistant") {
      for (const c of m.content || []) if (c.type === "toolCall" && c.name === "show_gamma" && c.arguments && c.arguments.doc) docs.add(String(c.arguments.doc));
    }
  }
  return docs;
}

/** One point per model request: the assistant messages' usage, enriched by model_request events.
 *  When the events reach back to the first request they pair up from the start (a request still in
 *  flight has no message yet); otherwise the stream was trimmed and they pair up from the end. */
export function usagePoints(entries, requests) {
  const assistants = entries.filter((e) => e.type === "message" && e.message && e.message.role === "assistant")
    .map((e) => e.message);
  const n = Math.max(assistants.length, requests.length);
  const fromStart = requests.length >= assistants.length;
  const points = [];
  for (let i = 0; i < n; i++) {
    const m = (fromStart ? assistants[i] : assistants[assistants.length - n + i]) || null;
    const r = (fromStart ? requests[i] : requests[requests.length - n + i]) || null;
    const u = (m && m.usage) || {};
    points.push({
      prompt: (r && (r.input_tokens || r.prompt_tokens)) || u.input || 0,
      cached: (r && r.cached_tokens) || u.cacheRead || 0,
      sharedPrefix: (r && r.shared_prefix_tokens) || 0,
      output: (r && r.output_tokens) || u.output || 0,
      reasoning: (r && r.reasoning_tokens) || u.reasoning || 0,
    });
  }
  return points;
}
