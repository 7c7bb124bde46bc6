// A real Yjs client for the proxy's SessionUIState endpoints (tests/integration/test_yjs_interop.py).
//
//   node tests/js/ui_client.mjs edit BASE_URL TOKEN SID [--no-snapshot]
//       seed a Y.Doc from GET /ui, edit it (nested Y.Map / Y.Array), POST the incremental V1 update
//       (and the JSON snapshot unless --no-snapshot) to /ui/sync, then read GET /ui back into a fresh doc
//   node tests/js/ui_client.mjs read BASE_URL TOKEN SID
//       print GET /ui decoded by yjs
//   node tests/js/ui_client.mjs garbage BASE_URL TOKEN SID
//       POST bytes yjs itself cannot decode; print the status
//   node tests/js/ui_client.mjs follow BASE_URL TOKEN SID
//       (live session) a follower subscribes to the SSE events, seeds from GET /ui, and applies each
//       `ui_update` event (the change only, a V1 update) while a second client makes edits; it must
//       end equal to GET /ui
// Prints one JSON object on stdout.
import * as Y from "yjs";

const [mode, base, token, sid, flag] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${token}`, "Content-Type": "application/json" };

function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, canonical(value[k])]));
  }
  return value;
}
const same = (a, b) => JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
const b64 = (bytes) => Buffer.from(bytes).toString("base64");
const unb64 = (text) => new Uint8Array(Buffer.from(text, "base64"));

async function call(method, path, body) {
  const res = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

function docFrom(update) {
  const doc = new Y.Doc();
  Y.applyUpdate(doc, unb64(update));
  return doc;
}

async function read() {
  const got = await call("GET", `/sessions/${sid}/ui`);
  const doc = docFrom(got.body.update);
  return { status: got.status, state: doc.getMap("state").toJSON(), matches: same(doc.getMap("state").toJSON(), got.body.snapshot) };
}

async function edit() {
  const seed = await call("GET", `/sessions/${sid}/ui`);
  const doc = docFrom(seed.body.update);
  const state = doc.getMap("state");
  const seedMatches = same(state.toJSON(), seed.body.snapshot);
  const before = Y.encodeStateVector(doc);
  doc.transact(() => {
    const panes = state.get("panes");
    const pane = new Y.Map();
    pane.set("id", "pjs");
    const tabIds = new Y.Array();
    tabIds.push(["tjs"]);
    pane.set("tabIds", tabIds);
    panes.push([pane]);
    const tab = new Y.Map();
    tab.set("id", "tjs");
    tab.set("ari", "gamma:file:d1?mode=edit#card_2");
    tab.set("title", "Opened from yjs");
    state.get("tabs").set("tjs", tab);
    state.get("activeTabByPane").set("pjs", "tjs");
    state.get("expandedDirs").push(["from-js/"]);
    state.get("mobile").set("view", "files");
  });
  const update = Y.encodeStateAsUpdate(doc, before);
  const body = { update: b64(update) };
  if (flag !== "--no-snapshot") body.snapshot = state.toJSON();
  const synced = await call("POST", `/sessions/${sid}/ui/sync`, body);
  const result = { seedMatches, syncStatus: synced.status, local: state.toJSON() };
  if (synced.status === 200) {
    result.syncSnapshot = synced.body.snapshot;
    result.syncDocMatches = same(docFrom(synced.body.update).getMap("state").toJSON(), synced.body.snapshot);
    Y.applyUpdate(doc, unb64(synced.body.update)); // merging the server's full state keeps the client consistent
    result.mergedMatches = same(state.toJSON(), synced.body.snapshot);
  } else {
    result.error = synced.body;
  }
  result.refetched = (await read()).state;
  return result;
}

async function garbage() {
  let yjsRejects = false;
  const junk = new Uint8Array([7, 200, 1, 99, 250]);
  try { Y.applyUpdate(new Y.Doc(), junk); } catch { yjsRejects = true; }
  const res = await call("POST", `/sessions/${sid}/ui/sync`, { update: b64(junk) });
  return { yjsRejects, status: res.status, error: res.body && res.body.error };
}

function frames(text) {
  const out = [];
  for (const frame of text.split("\n\n")) {
    const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
    if (data.length) out.push(data.join("\n"));
  }
  return out;
}

async function follow(edits = 5) {
  // Subscribe first, then seed: an update seen twice is harmless in Yjs, one missed is not.
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 30000);
  const res = await fetch(`${base}/sessions/${sid}/events`, { headers: { ...headers, "Last-Event-ID": "0" }, signal: controller.signal });
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const follower = docFrom((await call("GET", `/sessions/${sid}/ui`)).body.update);
  const writer = docFrom((await call("GET", `/sessions/${sid}/ui`)).body.update);
  const statuses = [];
  for (let i = 0; i < edits; i++) {
    const before = Y.encodeStateVector(writer);
    writer.getMap("state").get("expandedDirs").push([`follow-${i}/`]);
    statuses.push((await call("POST", `/sessions/${sid}/ui/sync`, { update: b64(Y.encodeStateAsUpdate(writer, before)) })).status);
  }
  const wanted = edits > 0 ? `follow-${edits - 1}/` : null;
  const result = { statuses, events: 0, eventKeys: [], maxEventBytes: 0 };
  let buffer = "";
  try {
    while (!follower.getMap("state").get("expandedDirs").toArray().includes(wanted)) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      const cut = buffer.lastIndexOf("\n\n");
      if (cut < 0) continue;
      for (const data of frames(buffer.slice(0, cut))) {
        const event = JSON.parse(data);
        if (event.type !== "ui_update") continue;
        result.events += 1;
        result.eventKeys = [...new Set([...result.eventKeys, ...Object.keys(event.data)])];
        result.maxEventBytes = Math.max(result.maxEventBytes, data.length);
        Y.applyUpdate(follower, unb64(event.data.update));
      }
      buffer = buffer.slice(cut + 2);
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  const server = await read();
  result.followerMatches = same(follower.getMap("state").toJSON(), server.state);
  result.state = follower.getMap("state").toJSON();
  return result;
}

const handlers = { edit, read, garbage, follow };
if (!handlers[mode]) {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
console.log(JSON.stringify(await handlers[mode]()));
