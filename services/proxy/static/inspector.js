// Gamma session inspector: plain ES modules against the proxy's public API (no build step).
// History from GET /transcript (paged), live from the events stream; the views are in js/.
import { $, el } from "./js/dom.js";
import { api, initToken, setToken, sessionPath, transcriptSince, followEvents, auth } from "./js/api.js";
import { buildItems, activeSkills, documentIds, usagePoints } from "./js/timeline_model.js";
import { renderSpend } from "./js/spend.js";
import { renderTimeline } from "./js/timeline.js";
import { renderTodo, renderSkills, renderPanes, renderForm } from "./js/state_view.js";
import { renderDecks } from "./js/deck.js";
import { renderUsage, renderStatusTimeline } from "./js/charts.js";
import { FilesView } from "./js/files.js";
import { ChecklistPane } from "./js/checklist.js";
import { messageBody, stopRun, abortedText } from "./js/runs.js";
import { loadBranches, rewindTo, withBranchItems } from "./js/branches.js";
import { Gallery } from "./js/images.js";
import { Attachments } from "./js/attach.js";

const EMPTY_YJS_UPDATE = "AAA="; // base64 of a V1 update that changes nothing: the sync carries a snapshot
let s = null; // the selected session's state
const timers = {};
const files = new FilesView($("files"), $("files-status"), () => s && s.sid);
const checklist = new ChecklistPane($("tasks").closest("section"));
const gallery = new Gallery($("lightbox"), () => s && s.sid);
const attach = new Attachments({ chips: $("attached"), picker: $("attach-picker"), pickerButton: $("attach"), zone: $("composer"),
  files, getSid: () => s && s.sid, say: (text, isError) => notice(text, isError) });

// What is streaming now: the reply's text, its reasoning summary (`reasoning_update`), the arguments
// of tool calls still being written (`tool_call_progress`); cleared when the message ends or restarts.
function freshLive() {
  return { streamingText: "", streamingReasoning: "", reasoningPart: null, toolProgress: new Map(),
    toolEnds: new Map(), extras: [], running: false };
}

function clearStreaming() {
  Object.assign(s.live, { streamingText: "", streamingReasoning: "", reasoningPart: null });
  s.live.toolProgress.clear();
}

function onReasoning(d) {
  const part = `${d.item_id || ""}:${d.summary_index || 0}`;
  const sep = s.live.reasoningPart !== null && s.live.reasoningPart !== part ? "\n\n" : "";
  s.live.reasoningPart = part;
  s.live.streamingReasoning += sep + (d.delta || "");
  invalidate("timeline");
}

function freshState(sid) {
  return { sid, session: null, entries: [], cursor: "0", abort: new AbortController(), dirty: new Set(),
    live: freshLive(), run: { id: null, running: false },
    requests: [], liveSkills: [], spans: [], branchReads: 0, todo: null, ui: null, decks: [], docIds: new Set(), branches: new Map() };
}

function notice(text, isError = false) {
  $("notice").textContent = text || "";
  $("notice").className = isError ? "error-text" : "ok";
}

function debounce(name, fn, ms = 150) {
  clearTimeout(timers[name]);
  timers[name] = setTimeout(fn, ms);
}

// ---------------------------------------------------------------- rendering (batched per frame)

function invalidate(...parts) {
  if (!s) return;
  for (const p of parts) s.dirty.add(p);
  if (timers.frame) return;
  timers.frame = requestAnimationFrame(() => { timers.frame = null; if (s) draw(); });
}

function draw() {
  const d = s.dirty;
  s.dirty = new Set();
  if (d.has("timeline")) renderTimeline($("timeline"), withBranchItems(buildItems(s.entries, s.live), s.branches), gallery);
  if (d.has("timeline")) renderSkills($("skills"), activeSkills(s.entries, s.liveSkills));
  if (d.has("timeline") || d.has("usage")) renderUsage($("usage"), usagePoints(s.entries, s.requests));
  if (d.has("usage")) renderSpend($("spend"), s.session && s.session.spend, s.reached);
  if (d.has("todo")) renderTodo($("tasks"), s.todo);
  if (d.has("ui")) { renderPanes($("panes"), s.ui); renderForm($("form"), s.ui && s.ui.activeForm, answerForm); }
  if (d.has("decks")) renderDecks($("decks"), s.decks);
  if (d.has("status")) renderStatusTimeline($("status-chart"), s.spans);
}

// ---------------------------------------------------------------- status

/** Records a status seen at `ts` (events, polls and our own wake carry their time) and shows the
 *  newest: a "waking" noted after the live event arrived is older than it, so it cannot stick. The
 *  run a message is aimed at (`s.run`) is the newest one too: a poll answered after a status event
 *  but read before it does not bring back a run that has ended. */
function setStatus(status, running, ts = Date.now(), runId = null) {
  let at = s.spans.length;
  while (at > 0 && s.spans[at - 1].ts > ts) at--;
  const before = s.spans[at - 1];
  if (!before || before.status !== status || before.running !== running || (running && before.runId !== runId)) {
    s.spans.splice(at, 0, { ts, status, running, runId });
  }
  const now = s.spans[s.spans.length - 1];
  s.run = { id: now.runId || null, running: now.running };
  $("badge").textContent = now.status;
  $("badge").className = `badge ${now.status}`;
  $("running").hidden = !now.running;
  $("stop").disabled = !now.running;
  const small = document.querySelector(`#sessions li[data-sid="${s.sid}"] .badge`);
  if (small) { small.textContent = now.status; small.className = `badge ${now.status}`; }
  // The notice never outlives what it announced: "waking…" goes once the session is live.
  if (now.status !== "waking" && $("notice").dataset.waking) { delete $("notice").dataset.waking; notice(`the session is ${now.status}`); }
  invalidate("status");
}

async function pollStatus() {
  if (!s) return;
  const asked = Date.now(); // the row is read after this: an event newer than that wins
  try {
    const view = await api(sessionPath(s.sid));
    if (view.id === s.sid) { s.session = view; setStatus(view.status, view.running, asked, view.run_id); invalidate("usage"); }
  } catch { /* shown on the next action */ }
}

// ---------------------------------------------------------------- loading

async function loadTranscript() {
  if (s && s.branchReload) await s.branchReload; // a branch read in flight: read on from its cursor
  if (!s) return;
  const sid = s.sid, from = s.cursor, branch = s.branchReads;
  const { entries, cursor } = await transcriptSince(sid, from);
  if (!s || sid !== s.sid) return;
  // Another read moved the cursor meanwhile (reads overlap when one is slow; a rewind reads from the
  // start again): these entries may be shown already, or be the old branch's. Read on from the cursor.
  if (s.cursor !== from || s.branchReads !== branch) return loadTranscript();
  s.cursor = cursor;
  if (!entries.length) return;
  s.entries.push(...entries);
  for (const doc of documentIds(entries)) s.docIds.add(doc);
  invalidate("timeline");
  if (entries.some((e) => e.type === "message" && e.message.role === "toolResult")) loadDecks();
}

async function loadBranchPoints() {
  const sid = s.sid;
  const branches = await loadBranches(sid, new Set(s.entries.map((e) => e.id)));
  if (!s || sid !== s.sid) return;
  s.branches = branches;
  invalidate("timeline");
}

/** After a rewind (ours or another client's `rewound` event): the active branch, files, tasks and
 *  decks are read again from the start. The new branch and its branch points are read aside and shown
 *  in one step (never an empty or half-read timeline beside the new branch points), and reloads that
 *  overlap (the click's and the `rewound` event's) run one after the other: the last one reads what
 *  the last rewind left. */
function reloadBranch() {
  if (!s) return Promise.resolve();
  if (s.branchReload) {
    s.branchAgain = true;
    return s.branchReload;
  }
  const session = s;
  session.branchReload = (async () => {
    try {
      do {
        session.branchAgain = false;
        await readBranch(session);
      } while (session.branchAgain && s === session);
    } finally {
      session.branchReload = null;
    }
  })();
  return session.branchReload;
}

async function readBranch(session) {
  const sid = session.sid;
  session.branchReads += 1;
  const [{ entries, cursor }] = await Promise.all([transcriptSince(sid, "0"), loadPreviewTodo(), files.refresh()]);
  const branches = await loadBranches(sid, new Set(entries.map((e) => e.id)));
  if (s !== session) return;
  session.entries = entries;
  session.cursor = cursor;
  session.branches = branches;
  for (const doc of documentIds(entries)) session.docIds.add(doc);
  session.live = freshLive();
  await loadDecks();
  invalidate("timeline", "todo", "decks");
}

async function loadUi() {
  const sid = s.sid;
  const { snapshot } = await api(sessionPath(sid, "/ui"));
  if (!s || sid !== s.sid) return;
  s.ui = snapshot;
  for (const tab of Object.values(snapshot.tabs || {})) {
    if (tab.ari && tab.ari.startsWith("gamma:file:")) s.docIds.add(tab.ari.slice("gamma:file:".length).split(/[?#]/)[0]);
  }
  invalidate("ui");
}

async function loadDecks() {
  const sid = s.sid;
  const decks = await Promise.all([...s.docIds].map(async (doc) => {
    try { return { doc, deck: await api(sessionPath(sid, `/documents/${encodeURIComponent(doc)}`)) }; }
    catch (err) { return { doc, error: err.message }; }
  }));
  if (!s || sid !== s.sid) return;
  s.decks = decks;
  invalidate("decks");
}

async function loadPreviewTodo() {
  const preview = await api(sessionPath(s.sid, "/preview"));
  s.todo = preview.todo;
  invalidate("todo");
}

const softly = (fn) => () => fn().catch((err) => notice(err.message, true));

// ---------------------------------------------------------------- events

function onToolEnd(d) {
  s.live.toolEnds.set(d.toolCallId, { text: d.result || "", isError: Boolean(d.isError), details: d.details });
  const ari = d.details && typeof d.details.ari === "string" ? d.details.ari : "";
  if (ari.startsWith("gamma:file:")) { s.docIds.add(ari.slice("gamma:file:".length)); debounce("decks", softly(loadDecks)); }
  if (["write", "edit", "bash"].includes(d.toolName)) debounce("files", () => files.refresh(), 300);
  invalidate("timeline");
}

const HANDLERS = {
  status: (d, ev) => setStatus(d.status, Boolean(d.running), ev.ts, d.run_id),
  run_aborted: (d, ev) => {
    const shown = s.live.extras.findLast((x) => x.stop === "aborted" && !x.reason);
    if (shown) Object.assign(shown, { reason: d.reason, text: abortedText(d) });
    else s.live.extras.push({ key: `aborted-${d.run_id}`, ts: ev.ts, kind: "failure", stop: "aborted", reason: d.reason, text: abortedText(d) });
    debounce("transcript", softly(loadTranscript));
    invalidate("timeline");
  },
  agent_start: () => { s.live.running = true; },
  agent_end: (d, ev) => {
    s.live.running = false;
    if (d.stopReason === "aborted") s.live.extras.push({ key: `end-${ev.ts}`, ts: ev.ts, kind: "failure", stop: "aborted", text: "the run was aborted" });
    invalidate("timeline");
  },
  message_start: (d) => { if (d.message && d.message.role === "assistant") clearStreaming(); },
  // restart: a model call retried after a dropped stream; what streamed so far is void.
  message_update: (d) => {
    if (d.restart) clearStreaming();
    else s.live.streamingText += d.delta || "";
    invalidate("timeline");
  },
  reasoning_update: onReasoning,
  tool_call_progress: (d) => { s.live.toolProgress.set(d.tool_call_id, { name: d.tool_name, bytes: d.bytes }); invalidate("timeline"); },
  message_end: () => { clearStreaming(); debounce("transcript", softly(loadTranscript)); },
  tool_execution_end: onToolEnd,
  model_request: (d) => { s.requests.push(d); invalidate("usage"); debounce("spend", softly(pollStatus), 1000); },
  // a spending or token cap ended the run (docs/costs.md): named in the spending panel; the run's
  // error entry in the transcript says the same on the timeline
  budget_reached: (d) => { s.reached = d; invalidate("usage"); debounce("spend", softly(pollStatus), 200); },
  todo: (d) => { s.todo = d.todo; invalidate("todo"); },
  ui_update: () => debounce("ui", softly(loadUi), 200), // the event carries a Yjs change only: re-read /ui
  skill_activated: (d) => { s.liveSkills.push({ name: d.name, type: d.type, requiredBy: d.requiredBy }); invalidate("timeline"); },
  // an ended contract (docs/architecture.md "Skill contracts"): no longer active
  skill_ended: (d) => { s.liveSkills = s.liveSkills.filter((k) => k.name !== d.name); checklist.onEvent({ type: "skill_ended", data: d }); debounce("transcript", softly(loadTranscript)); },
  message_user: () => debounce("transcript", softly(loadTranscript)),
  injection: (d) => {
    debounce("transcript", softly(loadTranscript));
    if (typeof d.ref === "string" && d.ref.startsWith("file:")) debounce("files", () => files.refresh(), 300);
    if (typeof d.ref === "string" && d.ref.startsWith("gamma:file:")) debounce("decks", softly(loadDecks));
  },
  compaction: (d, ev) => {
    if (d.phase === "applied") debounce("transcript", softly(loadTranscript));
    else s.live.extras.push({ key: `compaction-${d.requestId}-${d.phase}`, ts: ev.ts, kind: "compaction", phase: d.phase,
      text: d.error ? `error: ${d.error}` : d.tokensBefore ? `requested at ${d.tokensBefore} tokens` : "" });
    invalidate("timeline");
  },
  rewound: () => debounce("rewound", softly(reloadBranch), 100), // the active branch moved: read it again
  // The events it missed left Redis (a dormant session past its retention): the transcript has them.
  reset: () => debounce("transcript", softly(loadTranscript)),
  error: (d, ev) => {
    s.live.extras.push({ key: `error-${ev.ts}`, ts: ev.ts, kind: "error", text: d.error || "error" });
    invalidate("timeline");
  },
};

function onEvent(sid, ev) {
  if (!s || s.sid !== sid) return;
  checklist.onEvent(ev);
  const handler = HANDLERS[ev.type];
  if (handler) handler(ev.data || {}, ev);
}

// ---------------------------------------------------------------- sessions

async function loadSessions() {
  if (!auth.token) { notice("enter a token to begin", true); return; }
  try {
    const { sessions } = await api("/sessions");
    const list = $("sessions");
    list.replaceChildren();
    if (!sessions.length) list.append(el("li", { class: "empty" }, "No sessions yet."));
    for (const row of sessions) {
      list.append(el("li", { dataset: { sid: row.id }, class: s && s.sid === row.id ? "selected" : "" },
        el("button", { type: "button", class: "session-link", onclick: () => selectSession(row.id) },
          ...(row.title ? [el("span", { class: "session-name" }, row.title)] : []),
          el("code", {}, row.id), el("span", { class: "muted small" }, row.variant)),
        el("span", { class: `badge ${row.status}` }, row.status)));
    }
  } catch (err) { notice(err.message, true); }
}

async function selectSession(sid) {
  if (s) s.abort.abort();
  s = freshState(sid);
  checklist.reset();
  for (const li of $("sessions").children) li.classList.toggle("selected", li.dataset.sid === sid);
  $("session-title").textContent = sid;
  for (const id of ["message", "send", "suspend", "compact", "on-busy", "rename", "attach"]) $(id).disabled = false;
  attach.clear();
  $("files-status").textContent = "";
  try {
    s.session = await api(sessionPath(sid));
    if (s.session.title) $("session-title").textContent = `${s.session.title} (${sid})`;
    s.spans.push({ ts: s.session.created_at, status: "dormant", running: false });
    setStatus(s.session.status, s.session.running, Date.now(), s.session.run_id);
    await Promise.all([loadTranscript(), loadUi(), loadPreviewTodo(), files.refresh()]);
    await Promise.all([loadDecks(), loadBranchPoints()]);
  } catch (err) { notice(err.message, true); }
  invalidate("timeline", "todo", "ui", "decks", "status", "usage");
  // Replays the retained events (status history, model requests, errors) and then follows live ones.
  followEvents(sid, { signal: s.abort.signal, onEvent: (ev) => onEvent(sid, ev),
    onState: (st) => { $("stream-state").textContent = st === "open" ? "● events" : "○ reconnecting"; } });
}

$("create-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const model = {};
  if ($("model-name").value.trim()) model.name = $("model-name").value.trim();
  if ($("effort").value) model.reasoning_effort = $("effort").value;
  if ($("model-api").value) model.api = $("model-api").value;
  try {
    const row = await api("/sessions", { method: "POST", json: { variant: $("variant").value, model } });
    notice(`created ${row.id}`);
    await loadSessions();
    await selectSession(row.id);
  } catch (err) { notice(err.message, true); }
});

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  setToken($("token").value.trim());
  loadSessions();
});

// ---------------------------------------------------------------- controls

function clientContext() {
  const ui = (s && s.ui) || {};
  const visible = Object.entries(ui.activeTabByPane || {}).filter(([, tid]) => (ui.tabs || {})[tid])
    .map(([paneId, tid]) => ({ tabId: tid, paneId, ari: ui.tabs[tid].ari, title: ui.tabs[tid].title || undefined }));
  return { locale: (navigator.language || "en-US").slice(0, 35), viewport: { width: innerWidth, height: innerHeight },
    paneCapacity: 1, visibleTabs: visible };
}

$("composer").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = $("message").value.trim();
  if (!s) return;
  if (!text) { if (attach.paths.length) notice("type a message to send with the attachments", true); return; }
  $("message").value = "";
  const sentAt = Date.now();
  try {
    const accepted = await api(sessionPath(s.sid, "/messages"), { method: "POST",
      json: messageBody(text, $("on-busy").value, s.run, clientContext(), attach.paths) });
    attach.clear(); // sent with this message; a refused one keeps them (and its text) for another try
    if (accepted.woke) { notice("waking the session…"); $("notice").dataset.waking = "1"; setStatus("waking", false, sentAt); }
    else notice(accepted.status === "live" ? "sent" : `sent (${accepted.status})`);
    if (accepted.status === "waking") [1000, 3000, 6000].forEach((t) => setTimeout(pollStatus, t));
  } catch (err) {
    // 409 on a run that ended meanwhile: nothing was queued; the text stays for sending again.
    notice(err.status === 409 ? `not sent: ${err.message}` : err.message, true);
    $("message").value = text;
    if (err.status === 409) pollStatus();
  }
});

$("stop").addEventListener("click", async () => {
  if (!s) return;
  $("stop").disabled = true;
  try {
    const out = await stopRun(s.sid, s.run);
    notice(out.aborted ? `stopped ${out.run_id}` : "no run to stop");
  } catch (err) { notice(err.message, true); }
  await pollStatus();
});

$("message").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("composer").requestSubmit(); }
});

$("rename").addEventListener("click", async () => {
  if (!s) return;
  const title = prompt("Session title (empty clears it)", (s.session && s.session.title) || "");
  if (title === null) return;
  try {
    s.session = await api(sessionPath(s.sid), { method: "PATCH", json: { title: title.trim() || null } });
    $("session-title").textContent = s.session.title ? `${s.session.title} (${s.sid})` : s.sid;
    await loadSessions();
  } catch (err) { notice(err.message, true); }
});

$("suspend").addEventListener("click", async () => {
  try { await api(sessionPath(s.sid, "/suspend"), { method: "POST" }); notice("suspended"); await pollStatus(); }
  catch (err) { notice(err.message, true); }
});

$("compact").addEventListener("click", async () => {
  try { await api(sessionPath(s.sid, "/compact"), { method: "POST", json: {} }); notice("compaction requested"); }
  catch (err) { notice(err.message, true); }
});

/** Answers the open form with a snapshot-only sync (this page has no Yjs): the current /ui state,
 *  its activeForm given the answers and status; the runtime (or, dormant, the proxy) applies it. */
async function answerForm(status, answers) {
  try {
    const { snapshot } = await api(sessionPath(s.sid, "/ui"));
    if (!snapshot.activeForm) throw new Error("the form is gone");
    snapshot.activeForm = { ...snapshot.activeForm, answers, status };
    const out = await api(sessionPath(s.sid, "/ui/sync"), { method: "POST", json: { update: EMPTY_YJS_UPDATE, snapshot } });
    s.ui = out.snapshot;
    invalidate("ui");
    notice(`form ${status}`);
  } catch (err) { notice(`the form answer was refused: ${err.message}`, true); }
}

// "rewind here" on a user message, "switch" on a branch point: both are a rewind (POST /rewind).
$("timeline").addEventListener("click", async (ev) => {
  const button = ev.target.closest("button[data-rewind]");
  if (!button || !s) return;
  button.disabled = true;
  try {
    const out = await rewindTo(s.sid, button.dataset.rewind);
    notice(`rewound to ${out.entry_id}` + (out.aborted_run_id ? ` (stopped ${out.aborted_run_id})` : ""));
    await reloadBranch();
  } catch (err) { notice(err.message, true); button.disabled = false; }
});

files.bindDrop($("files-zone"), $("file-picker"));

// Status can change without an event (idle → dormant after GAMMA_IDLE_S, waking → live): poll cheaply.
setInterval(() => { pollStatus(); if (s) invalidate("status"); }, 4000);

$("token").value = initToken();
loadSessions();
