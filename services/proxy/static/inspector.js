// Gamma session inspector: plain JS against the proxy's public API (no build step).
// The token comes from ?token= (then removed from the address bar) or the form, kept in localStorage.
"use strict";

const TOKEN_KEY = "gamma.token";
const $ = (id) => document.getElementById(id);
const state = { token: "", sid: null, stream: null, refreshTimer: null, pendingText: "", lastEventId: "$" };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function notice(text, ok = false) {
  const n = $("notice");
  n.textContent = text || "";
  n.className = ok ? "ok" : "";
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: `Bearer ${state.token}` }, options.headers || {});
  if (options.json !== undefined) {
    headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(options.json);
  }
  const res = await fetch(path, { ...options, headers });
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = text; }
  if (!res.ok) {
    const message = body && body.error ? body.error : `${res.status} ${res.statusText}`;
    throw new Error(`${options.method || "GET"} ${path}: ${message}`);
  }
  return body;
}

// ---------------------------------------------------------------- token

function initToken() {
  const url = new URL(window.location.href);
  const fromQuery = url.searchParams.get("token");
  if (fromQuery) {
    localStorage.setItem(TOKEN_KEY, fromQuery);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  state.token = localStorage.getItem(TOKEN_KEY) || "";
  $("token").value = state.token;
}

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.token = $("token").value.trim();
  localStorage.setItem(TOKEN_KEY, state.token);
  loadSessions();
});

// ---------------------------------------------------------------- sessions

async function loadSessions() {
  if (!state.token) { notice("enter a token"); return; }
  try {
    const { sessions } = await api("/sessions");
    const list = $("sessions");
    list.replaceChildren();
    if (!sessions.length) list.append(el("li", { class: "empty" }, "no sessions yet"));
    for (const s of sessions) {
      const item = el("li", { dataset: { sid: s.id }, onclick: () => selectSession(s.id) },
        el("code", {}, s.id), el("span", { class: `badge ${s.status}` }, s.status));
      if (s.id === state.sid) item.classList.add("selected");
      list.append(item);
    }
    notice(`${sessions.length} session(s)`, true);
  } catch (err) { notice(err.message); }
}

$("new-session").addEventListener("click", async () => {
  try {
    const s = await api("/sessions", { method: "POST", json: { variant: $("variant").value } });
    await loadSessions();
    await selectSession(s.id);
  } catch (err) { notice(err.message); }
});

async function selectSession(sid) {
  if (state.stream) state.stream.abort();
  state.sid = sid;
  state.pendingText = "";
  state.lastEventId = "$";
  for (const li of $("sessions").children) li.classList.toggle("selected", li.dataset.sid === sid);
  $("session-title").textContent = sid;
  for (const id of ["message", "send", "suspend", "compact"]) $(id).disabled = false;
  $("events").replaceChildren();
  await refresh();
  streamEvents(sid);
}

function setBadge(status, running) {
  const badge = $("badge");
  badge.textContent = status;
  badge.className = `badge ${status}`;
  $("running").hidden = !running;
  const item = [...$("sessions").children].find((li) => li.dataset.sid === state.sid);
  const small = item && item.querySelector(".badge");
  if (small) { small.textContent = status; small.className = `badge ${status}`; }
}

async function refresh() {
  const sid = state.sid;
  if (!sid) return;
  try {
    const [session, preview] = await Promise.all([api(`/sessions/${sid}`), api(`/sessions/${sid}/preview`)]);
    if (sid !== state.sid) return;
    setBadge(session.status, session.running);
    renderChat(preview.transcript);
    renderTasks(preview.todo);
    renderPanes(preview.ui);
    await loadTranscript();
  } catch (err) { notice(err.message); }
}

function scheduleRefresh(delay = 250) {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(refresh, delay);
}

// ---------------------------------------------------------------- rendering

function renderChat(entries) {
  const chat = $("chat");
  chat.replaceChildren();
  if (!entries.length) chat.append(el("p", { class: "empty" }, "No messages yet."));
  for (const e of entries) {
    const who = { user: "you", assistant: "agent", message_user: "agent → you", custom: e.customType || "note" }[e.kind] || e.kind;
    const bubble = el("div", { class: `msg ${e.kind}` + (e.blockOnUser ? " blocking" : "") }, el("span", { class: "who" }, who), e.text);
    chat.append(bubble);
  }
  if (state.pendingText) chat.append(el("div", { class: "msg assistant pending" }, el("span", { class: "who" }, "agent (streaming)"), state.pendingText));
  chat.scrollTop = chat.scrollHeight;
}

function renderTasks(todo) {
  const list = $("tasks");
  list.replaceChildren();
  if (!todo || !todo.items.length) { list.append(el("li", { class: "empty" }, "no tasks")); return; }
  for (const item of todo.items) list.append(el("li", { dataset: { status: item.status } }, `${item.content} (${item.status})`));
}

function renderPanes(ui) {
  const box = $("panes");
  box.replaceChildren();
  const panes = (ui && ui.panes) || [];
  if (!panes.length) box.append(el("p", { class: "empty" }, "no panes open"));
  for (const pane of panes) {
    const active = (ui.activeTabByPane || {})[pane.id];
    const tabs = el("ul");
    for (const tid of pane.tabIds || []) {
      const tab = (ui.tabs || {})[tid] || { ari: "?" };
      tabs.append(el("li", { class: tid === active ? "active" : "" }, `${tab.title || tid}: `, el("code", {}, tab.ari)));
    }
    box.append(el("div", { class: "pane" }, el("strong", {}, `pane ${pane.id}`), tabs));
  }
  const form = ui && ui.activeForm;
  const formBox = $("form");
  formBox.replaceChildren();
  if (form) {
    formBox.append(el("div", { class: "pane" }, el("strong", {}, `form: ${form.title} `), el("span", { class: "tag" }, form.status),
      el("ul", {}, ...(form.fields || []).map((f) => el("li", {}, `${f.label}: ${JSON.stringify((form.answers || {})[f.id] ?? null)}`)))));
  }
}

async function loadTranscript() {
  const sid = state.sid;
  const entries = [];
  for (let cursor = "0", more = true; more;) {  // paged: follow next_cursor while has_more
    const page = await api(`/sessions/${sid}/transcript?cursor=${cursor}`);
    entries.push(...page.entries);
    cursor = page.next_cursor;
    more = page.has_more;
  }
  if (sid !== state.sid) return;
  const list = $("transcript");
  list.replaceChildren();
  for (const entry of entries) {
    const details = entry.details || (entry.message && entry.message.details) || {};
    const trusted = details.trusted === true;
    const tags = [el("span", { class: "tag" }, entry.type + (entry.message ? `/${entry.message.role}` : ""))];
    if (trusted) tags.push(el("span", { class: "tag trusted" }, `trusted ${details.injectionType || entry.customType || ""}`));
    list.append(el("li", { class: trusted ? "trusted" : "" }, ...tags, el("pre", {}, JSON.stringify(entry, null, 1))));
  }
}
$("reload-transcript").addEventListener("click", () => loadTranscript().catch((err) => notice(err.message)));

// ---------------------------------------------------------------- events (SSE over fetch, so the token stays in a header)

function handleEvent(event) {
  const log = $("events");
  const summary = event.type === "message_update" ? "" : JSON.stringify(event.data).slice(0, 160);
  if (event.type !== "message_update") {
    log.append(el("li", {}, el("span", { class: "tag" }, event.type), summary));
    while (log.children.length > 200) log.firstChild.remove();
    log.scrollTop = log.scrollHeight;
  }
  switch (event.type) {
    case "message_update":
      // restart: a model call is retried after a dropped stream; what streamed so far is void.
      state.pendingText = event.data.restart ? "" : state.pendingText + (event.data.delta || "");
      renderPendingOnly();
      break;
    case "status":
      setBadge(event.data.status, event.data.running);
      scheduleRefresh();
      break;
    // ui_update carries only the change (a Yjs V1 update), not the document: this page has no Yjs,
    // so it re-reads the state (GET /preview) instead of applying it; tests/js/ui_client.mjs applies it.
    case "message_end":
    case "message_user":
    case "agent_end":
    case "todo":
    case "ui_update":
    case "compaction":
    case "injection":
      if (event.type === "message_end") state.pendingText = "";
      scheduleRefresh();
      break;
    default:
      break;
  }
}

function renderPendingOnly() {
  const chat = $("chat");
  let bubble = chat.querySelector(".msg.pending");
  if (!bubble) {
    bubble = el("div", { class: "msg assistant pending" }, el("span", { class: "who" }, "agent (streaming)"), "");
    chat.append(bubble);
  }
  bubble.lastChild.textContent = state.pendingText;
  chat.scrollTop = chat.scrollHeight;
}

function parseFrame(frame) {
  let id = null;
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) continue;
    if (line.startsWith("id:")) id = line.slice(3).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  return { id, data: data.join("\n") };
}

async function streamEvents(sid) {
  const controller = new AbortController();
  state.stream = controller;
  while (!controller.signal.aborted) {
    try {
      const res = await fetch(`/sessions/${sid}/events`, {
        headers: { Authorization: `Bearer ${state.token}`, "Last-Event-ID": state.lastEventId },
        signal: controller.signal,
      });
      if (!res.ok) throw new Error(`events: ${res.status}`);
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const { id, data } = parseFrame(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
          if (id) state.lastEventId = id;
          if (data && sid === state.sid) {
            try { handleEvent(JSON.parse(data)); } catch (err) { console.warn("bad event", err); }
          }
        }
      }
    } catch (err) {
      if (controller.signal.aborted) return;
      console.warn(err);
    }
    await new Promise((r) => setTimeout(r, 1500));
  }
}

// ---------------------------------------------------------------- actions

function clientContext() {
  return {
    locale: (navigator.language || "en-US").slice(0, 35),
    viewport: { width: window.innerWidth, height: window.innerHeight },
    paneCapacity: 1,
    visibleTabs: [],
  };
}

$("composer").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = $("message").value.trim();
  if (!text || !state.sid) return;
  $("message").value = "";
  $("chat").append(el("div", { class: "msg user pending" }, el("span", { class: "who" }, "you (sending)"), text));
  try {
    const accepted = await api(`/sessions/${state.sid}/messages`, { method: "POST", json: { message: text, client_context: clientContext() } });
    setBadge(accepted.status, false);
    notice(accepted.woke ? "waking the session…" : "sent", true);
    scheduleRefresh(1000);
  } catch (err) { notice(err.message); }
});

$("message").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("composer").requestSubmit(); }
});

$("suspend").addEventListener("click", async () => {
  try { await api(`/sessions/${state.sid}/suspend`, { method: "POST" }); notice("suspended", true); scheduleRefresh(); }
  catch (err) { notice(err.message); }
});

$("compact").addEventListener("click", async () => {
  try { await api(`/sessions/${state.sid}/compact`, { method: "POST", json: {} }); notice("compaction requested", true); }
  catch (err) { notice(err.message); }
});

// Status can change without an event (idle → dormant after GAMMA_IDLE_S): poll the row cheaply.
setInterval(async () => {
  if (!state.sid || !state.token) return;
  try { const s = await api(`/sessions/${state.sid}`); setBadge(s.status, s.running); } catch { /* shown on next action */ }
}, 5000);

initToken();
loadSessions();
