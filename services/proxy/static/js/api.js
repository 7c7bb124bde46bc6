// The proxy's public API with the bearer token in a header. Server-sent events are read with fetch
// (EventSource cannot send Authorization), resuming with Last-Event-ID after every disconnect.
const TOKEN_KEY = "gamma.token";
export const auth = { token: "" };

export function initToken() {
  const url = new URL(window.location.href);
  const fromQuery = url.searchParams.get("token");
  if (fromQuery) {
    localStorage.setItem(TOKEN_KEY, fromQuery);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  auth.token = localStorage.getItem(TOKEN_KEY) || "";
  return auth.token;
}

export function setToken(token) {
  auth.token = token;
  localStorage.setItem(TOKEN_KEY, token);
}

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export async function request(path, options = {}) {
  const headers = { Authorization: `Bearer ${auth.token}`, ...(options.headers || {}) };
  let body = options.body;
  if (options.json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(options.json);
  }
  const res = await fetch(path, { method: options.method || "GET", headers, body });
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`;
    try { const err = await res.json(); if (err && err.error) message = err.error; } catch { /* not JSON */ }
    throw new ApiError(res.status, message);
  }
  return res;
}

export async function api(path, options = {}) {
  const res = await request(path, options);
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

export const sessionPath = (sid, rest = "") => `/sessions/${encodeURIComponent(sid)}${rest}`;
export const filePath = (sid, path) => sessionPath(sid, "/workspace/files/" + path.split("/").map(encodeURIComponent).join("/"));

/** Every transcript entry after `cursor` (the API pages: follow next_cursor while has_more). */
export async function transcriptSince(sid, cursor) {
  const entries = [];
  for (let more = true; more;) {
    const page = await api(sessionPath(sid, `/transcript?cursor=${cursor}`));
    entries.push(...page.entries);
    cursor = page.next_cursor;
    more = page.has_more;
  }
  return { entries, cursor };
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

/** Follows the session's events until `signal` aborts; `onEvent(event)`, `onState("open"|"retrying")`. */
export async function followEvents(sid, { signal, onEvent, onState, lastEventId = "0" }) {
  while (!signal.aborted) {
    try {
      const res = await fetch(sessionPath(sid, "/events"), {
        headers: { Authorization: `Bearer ${auth.token}`, "Last-Event-ID": lastEventId }, signal,
      });
      if (!res.ok) throw new Error(`events: ${res.status}`);
      onState("open");
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
          if (id) lastEventId = id;
          if (data) {
            try { onEvent(JSON.parse(data)); } catch (err) { console.warn("bad event", err); }
          }
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      console.warn(String(err));
    }
    onState("retrying");
    await new Promise((r) => setTimeout(r, 1500));
  }
}
