// The client against a running stack (tests/integration/test_typescript_client.py starts it and runs
// this with Node's test runner): GAMMA_BASE_URL, GAMMA_TOKEN, GAMMA_OTHER_TOKEN.
import assert from "node:assert/strict";
import { test } from "node:test";

import { sessionEvents } from "../src/events.mjs";
import { alice, bob, bounded, collect, isEnd, refused } from "./support.mjs";

test("sessions: create, read, list; another user's session is a 404", async () => {
  const session = await alice.createSession({ variant: "base" });
  assert.match(session.id, /\S/);
  assert.equal((await alice.getSession(session.id)).id, session.id);
  assert.ok((await alice.listSessions()).sessions.some((s) => s.id === session.id));
  assert.equal((await refused(bob.getSession(session.id))).status, 404);
});

test("a prompt's events arrive; Last-Event-ID resumes after the id given", async () => {
  const { id: sid } = await alice.createSession();
  const first = bounded(90_000);
  const live = sessionEvents(alice, sid, { signal: first.signal });
  const stream = live[Symbol.asyncIterator]();
  await collect(stream, (f) => f.kind === "connected");
  const accepted = await alice.postMessage(sid, { message: "hello from the typed client" });
  assert.match(accepted.prompt_id, /\S/);
  const frames = (await collect(stream, isEnd)).flatMap((f) => (f.kind === "event" ? [f] : []));
  first.done();
  assert.equal(frames.at(-1)?.event.type, "agent_end");
  const user = frames.findIndex((f) => f.event.type === "message_user");
  assert.ok(user >= 0 && user < frames.length - 1, "a message_user event before the end");
  assert.equal(live.lastEventId, frames.at(-1)?.id);

  const again = bounded(90_000);
  const resumed = sessionEvents(alice, sid, { lastEventId: frames[user]!.id, signal: again.signal });
  const replay = (await collect(resumed[Symbol.asyncIterator](), isEnd)).flatMap((f) => (f.kind === "event" ? [f] : []));
  again.done();
  assert.deepEqual(replay.map((f) => f.id), frames.slice(user + 1).map((f) => f.id));
});

test("heartbeats arrive on an idle stream", async () => {
  const { id: sid } = await alice.createSession();
  const stop = bounded(30_000);
  const frames = sessionEvents(alice, sid, { signal: stop.signal });
  const seen = await collect(frames[Symbol.asyncIterator](), (f) => f.kind === "heartbeat");
  stop.done();
  assert.equal(seen.at(-1)?.kind, "heartbeat");
});

test("expected_run_id that is not the active run is refused; abort with no run is a no-op", async () => {
  const { id: sid } = await alice.createSession();
  const err = await refused(alice.postMessage(sid, { message: "steer", expected_run_id: "run_not_active" }));
  assert.equal(err.status, 409);
  const aborted = await alice.abort(sid);
  assert.equal(aborted.aborted, false);
});

test("uploads: bytes in, the same bytes out", async () => {
  const { id: sid } = await alice.createSession();
  const bytes = new Uint8Array([0, 1, 2, 250, 255, 10, 13]);
  const written = await alice.uploadFile(sid, "uploads/data.bin", bytes);
  assert.equal(written.size, bytes.length);
  assert.deepEqual(await alice.readFile(sid, "uploads/data.bin"), bytes);
});

test("documents: If-Match with the read ETag writes; a stale one is a 409", async () => {
  const { id: sid } = await alice.createSession();
  const created = await alice.putDocument(sid, "deck", { title: "One", cards: [{ id: "card_1", title: "A" }] });
  const read = await alice.getDocument(sid, "deck");
  assert.equal(read.etag, created.etag);
  assert.equal(read.value.title, "One");
  const updated = await alice.patchDocument(sid, "deck", { cards: [{ id: "card_1", title: "B" }] }, read.etag);
  assert.notEqual(updated.etag, read.etag);
  const stale = await refused(alice.putDocument(sid, "deck", { title: "Two" }, read.etag));
  assert.equal(stale.status, 409);
  assert.equal((await alice.getDocument(sid, "deck")).value.title, "One");
  const deleted = await alice.deleteDocument(sid, "deck", updated.etag);
  assert.equal(deleted.deleted, true);
  assert.equal((await refused(alice.getDocument(sid, "deck"))).status, 404);
});

test("a stream aborted by its caller leaves no timer behind, even with its iterator dropped mid-stream", async () => {
  const { id: sid } = await alice.createSession();
  const stop = bounded(30_000);
  await collect(sessionEvents(alice, sid, { signal: stop.signal })[Symbol.asyncIterator](), (f) => f.kind === "connected");
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
  const before = timers(); // the bound's and the stream's heartbeat watchdog (the iterator is parked at a yield)
  stop.done();
  assert.equal(timers(), before - 2); // a watchdog left pending kept Node alive for its 45 s
});
