// The client on a run that is really running (a scripted prompt whose `bash` step sleeps in the sandbox):
// expected_run_id steers into it, abort stops it by id; and the events stream across dropped connections.
import assert from "node:assert/strict";
import { test } from "node:test";

import { GammaClient } from "../src/client.mjs";
import { sessionEvents, type Frame } from "../src/events.mjs";
import { alice, baseUrl, bash, bounded, collect, isEnd, isEvent, refused, script, token } from "./support.mjs";

const eventOf = (frames: Frame[]) => {
  const last = frames.at(-1);
  assert.ok(last?.kind === "event", "the stream ended before the event");
  return last.event;
};

test("abort of a live run: expected_run_id is accepted into it, the abort names it and keeps the steer", async () => {
  const { id: sid } = await alice.createSession();
  const stop = bounded(120_000);
  const stream = sessionEvents(alice, sid, { signal: stop.signal })[Symbol.asyncIterator]();
  await collect(stream, (f) => f.kind === "connected");
  await alice.postMessage(sid, { message: script(bash("sleep 37.413")) });
  const started = eventOf(await collect(stream, isEvent("tool_execution_start")));
  const runId = started.run_id;
  assert.ok(typeof runId === "string" && runId.startsWith("run_"), `a run id on the event: ${String(runId)}`);
  const session = await alice.getSession(sid);
  assert.equal(session.running, true);
  assert.equal(session.run_id, runId);

  const steered = await alice.postMessage(sid, { message: "steered in", on_busy: "steer", expected_run_id: runId });
  assert.equal(steered.status, "live");
  const aborted = await alice.abort(sid, runId);
  assert.deepEqual(aborted, { aborted: true, run_id: runId, kept: 1 }); // the steer the model had not taken
  const ended = eventOf(await collect(stream, isEvent("run_aborted")));
  stop.done();
  assert.equal(ended.data?.["run_id"], runId); // the run has ended: it is named in the data
  assert.equal(ended.data?.["kept"], 1);

  assert.equal((await alice.getSession(sid)).running, false);
  const stale = await refused(alice.postMessage(sid, { message: "late", on_busy: "steer", expected_run_id: runId }));
  assert.equal(stale.status, 409);
  assert.deepEqual((stale.body as { detail: unknown }).detail, { run_id: null });
  assert.equal((await alice.abort(sid)).aborted, false);
});

/** The client's fetch, with each events stream it opens cuttable as a dropped connection cuts it: `drop()`
 * errors the body being read (as fetch does when the socket closes mid-response) and closes the real
 * connection. `resumedFrom` holds each stream request's Last-Event-ID (null: none). */
class DroppingFetch {
  readonly resumedFrom: (string | null)[] = [];
  #drop: (() => void) | undefined;

  readonly fetch: typeof fetch = async (input, init) => {
    const resp = await fetch(input, init);
    const headers = new Headers(init?.headers);
    if (headers.get("Accept") !== "text/event-stream" || resp.body === null) return resp;
    this.resumedFrom.push(headers.get("Last-Event-ID"));
    const upstream = resp.body.getReader();
    let body!: ReadableStreamDefaultController<Uint8Array>;
    const stream = new ReadableStream<Uint8Array>({
      start: (controller) => { body = controller; },
      pull: async (controller) => {
        try {
          const { value, done } = await upstream.read();
          if (done) controller.close();
          else controller.enqueue(value);
        } catch (err) {
          controller.error(err); // a no-op once dropped
        }
      },
      cancel: (reason) => upstream.cancel(reason),
    });
    this.#drop = () => {
      body.error(new TypeError("terminated"));
      upstream.cancel().catch(() => {});
    };
    return new Response(stream, { status: resp.status, headers: resp.headers });
  };

  get connections(): number {
    return this.resumedFrom.length;
  }

  drop(): void {
    this.#drop?.();
  }
}

test("the events stream reconnects after a drop, resumes with Last-Event-ID and misses nothing", async () => {
  const { id: sid } = await alice.createSession();
  const net = new DroppingFetch();
  const stop = bounded(120_000);
  const subscription = sessionEvents(new GammaClient({ baseUrl, token, fetch: net.fetch }), sid, { signal: stop.signal });
  const stream = subscription[Symbol.asyncIterator]();
  await collect(stream, (f) => f.kind === "connected");
  // Three tool calls a second apart: each drop (at a tool's start) leaves events to happen while the
  // client waits the stream's `retry` before it reconnects.
  await alice.postMessage(sid, { message: script(bash("sleep 1"), bash("sleep 1"), bash("sleep 1")) });
  const received: { id: string; connection: number }[] = [];
  let dropped = 0; // the last connection cut: one cut per connection, at the first tool start it delivers
  for (;;) {
    const next = await stream.next();
    assert.ok(!next.done, "the stream ended before the run did");
    if (next.value.kind !== "event") continue;
    received.push({ id: next.value.id, connection: net.connections });
    if (next.value.event.type === "tool_execution_start" && dropped < net.connections) {
      dropped = net.connections;
      net.drop();
    }
    if (next.value.event.type === "agent_end") break;
  }
  stop.done();
  // The frames a cut connection had already delivered are read first; the run may end among them.
  assert.ok(net.connections >= 3, `at least two reconnects (${net.connections} connections)`);
  assert.equal(subscription.reconnects, net.connections - 1);
  assert.equal(net.resumedFrom[0], null);
  for (let k = 2; k <= net.connections; k++) {
    // Each reconnect asks for what follows the last event the connection before it delivered.
    const last = received.filter((r) => r.connection === k - 1).at(-1);
    assert.ok(last !== undefined && received.some((r) => r.connection === k), `connection ${k} delivered events`);
    assert.equal(net.resumedFrom[k - 1], last.id);
  }
  // Nothing missed and nothing twice: the same ids as the stream holds from the first one received.
  const replay = bounded(60_000);
  const frames = await collect(sessionEvents(alice, sid, { lastEventId: "0", signal: replay.signal })[Symbol.asyncIterator](), isEnd);
  replay.done();
  const held = frames.flatMap((f) => (f.kind === "event" ? [f.id] : []));
  const first = held.indexOf(received[0]!.id);
  assert.ok(first >= 0, "the first event received is in the stream");
  assert.deepEqual(received.map((r) => r.id), held.slice(first));
});
