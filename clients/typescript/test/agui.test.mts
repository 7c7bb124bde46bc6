// The AG-UI route driven by the official client: `@ag-ui/client`'s HttpAgent (through GammaAgent, which only
// adds the reattach), whose every run passes the client's own event verifier (verifyEvents) and applies the
// state snapshot and JSON Patch deltas to its copy.
import assert from "node:assert/strict";
import { test } from "node:test";

import type { BaseEvent, Message } from "@ag-ui/client";

import { GammaAgent } from "../src/ag-ui.mjs";
import { alice, baseUrl, bash, script, token } from "./support.mjs";

const textOf = (messages: Message[]) =>
  messages.flatMap((m) => (m.role === "assistant" && typeof m.content === "string" ? [m.content] : []));

function recorder(agent: GammaAgent): BaseEvent[] {
  const seen: BaseEvent[] = [];
  agent.subscribe({ onEvent: ({ event }) => { seen.push(event); } });
  return seen;
}

async function uiState(sid: string): Promise<Record<string, unknown>> {
  const resp = await alice.request("GET", `/sessions/${encodeURIComponent(sid)}/ui`);
  return ((await resp.json()) as { snapshot: Record<string, unknown> }).snapshot;
}

/** The UI state without `costs`: the run's cost record is written after its end (services/runtime/costs.py,
 * after the `agent_end` that ends the AG-UI run), so it reaches the client with the next run. */
function withoutCosts(ui: unknown): Record<string, unknown> {
  const { costs: _costs, ...rest } = ui as Record<string, unknown>;
  return rest;
}

test("a deck request streams to completion, its question is an interrupt, the answer resumes it", async () => {
  const { id: sid } = await alice.createSession();
  const agent = new GammaAgent({ baseUrl, token, sessionId: sid });
  const seen = recorder(agent);
  agent.addMessage({ id: "u1", role: "user", content: "make a presentation about otters" });
  await agent.runAgent();

  const types = new Set<string>(seen.map((e) => e.type));
  for (const t of ["RUN_STARTED", "STATE_SNAPSHOT", "STATE_DELTA", "REASONING_MESSAGE_CONTENT", "TOOL_CALL_START",
    "TOOL_CALL_RESULT", "TEXT_MESSAGE_CONTENT", "RUN_FINISHED"]) assert.ok(types.has(t), `a ${t} event`);
  const tools = seen.flatMap((e) => (e.type === "TOOL_CALL_START" ? [(e as unknown as { toolCallName: string }).toolCallName] : []));
  assert.ok(tools.includes("show_gamma") && tools.includes("todo"), tools.join(","));
  assert.ok(textOf(agent.messages).some((t) => t.includes("Your deck about otters is ready")), "the final message");

  // The question that ended the run (message_user with blockOnUser) is the run's interrupt.
  const finished = seen.at(-1) as unknown as { type: string; outcome: { type: string; interrupts: { id: string; reason: string }[] } };
  assert.equal(finished.type, "RUN_FINISHED");
  assert.equal(finished.outcome.type, "interrupt");
  const [question] = finished.outcome.interrupts;
  assert.ok(question !== undefined && question.reason === "input_required");
  assert.deepEqual(agent.pendingInterrupts.map((i) => i.id), [question.id]);

  // State: the snapshot at the start had no tab; the deltas opened the deck's, and the client's copy is the UI.
  const first = seen.find((e) => e.type === "STATE_SNAPSHOT") as unknown as { snapshot: { ui: { tabs: object } } };
  assert.deepEqual(first.snapshot.ui.tabs, {});
  const state = agent.state as { ui: Record<string, unknown>; tasks: { items: { status: string }[] }; skills: unknown[] };
  assert.deepEqual(withoutCosts(state.ui), withoutCosts(await uiState(sid)));
  assert.deepEqual(state.tasks.items.map((i) => i.status), ["complete", "complete", "complete"]);
  assert.deepEqual(state.skills, []); // the workflow and its references ended with the audited completion

  // The answer resumes the thread: a new run whose prompt is the answer.
  const before = agent.messages.length;
  await agent.runAgent({ resume: [{ interruptId: question.id, status: "resolved", payload: { answer: "yes please" } }] });
  assert.ok(textOf(agent.messages.slice(before)).some((t) => t.includes("You said: 'yes please'")), "the answer arrived");
  assert.deepEqual(withoutCosts((agent.state as { ui: unknown }).ui), withoutCosts(await uiState(sid)));
});

test("a steer mid-run arrives: a second client's message joins the running run, both streams end with it", async () => {
  const { id: sid } = await alice.createSession();
  const agent = new GammaAgent({ baseUrl, token, sessionId: sid });
  const steerer = new GammaAgent({ baseUrl, token, sessionId: sid });
  let steered: Promise<unknown> | undefined;
  agent.subscribe({
    onToolCallEndEvent: ({ toolCallName }) => {
      if (toolCallName !== "bash" || steered !== undefined) return;
      steerer.addMessage({ id: "s1", role: "user", content: "steered in" });
      steered = steerer.runAgent();
    },
  });
  agent.addMessage({ id: "u1", role: "user", content: script(bash("sleep 3")) });
  await agent.runAgent();
  assert.ok(steered !== undefined, "the bash call was seen");
  await steered;
  // The model's next call, after the bash batch, took the steer: its answer names it, on both streams.
  assert.ok(textOf(agent.messages).some((t) => t.includes("You said: 'steered in'")), textOf(agent.messages).join(" | "));
  assert.ok(textOf(steerer.messages).some((t) => t.includes("You said: 'steered in'")));
});

/** The agent's fetch, with the response body it is reading cuttable as a dropped connection cuts it;
 * `lastEventIds` holds each request's Last-Event-ID (null: none). */
class CuttableFetch {
  readonly lastEventIds: (string | null)[] = [];
  #cut: (() => void) | undefined;

  readonly fetch = async (url: string, init: RequestInit): Promise<Response> => {
    this.lastEventIds.push(new Headers(init.headers).get("Last-Event-ID"));
    const resp = await fetch(url, init);
    if (resp.body === null) return resp;
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
          controller.error(err);
        }
      },
      cancel: (reason) => upstream.cancel(reason),
    });
    this.#cut = () => {
      body.close(); // the connection ends mid-run, before RUN_FINISHED
      upstream.cancel().catch(() => {});
    };
    return new Response(stream, { status: resp.status, headers: resp.headers });
  };

  cut(): void {
    this.#cut?.();
  }
}

const identity = (e: BaseEvent) => {
  const ev = e as unknown as { type: string; messageId?: string; toolCallId?: string };
  return `${ev.type}:${ev.messageId ?? ev.toolCallId ?? ""}`;
};
const relayed = (e: BaseEvent) => !["RUN_STARTED", "STATE_SNAPSHOT", "STATE_DELTA"].includes(e.type);

test("a dropped run reattaches with connectAgent: the rest of the run, nothing twice, nothing missed", async () => {
  const { id: sid } = await alice.createSession();
  const net = new CuttableFetch();
  const agent = new GammaAgent({ baseUrl, token, sessionId: sid, fetch: net.fetch });
  const seen = recorder(agent);
  let cut = false;
  agent.subscribe({
    onToolCallEndEvent: ({ toolCallName }) => {
      if (toolCallName === "bash" && !cut) {
        cut = true;
        net.cut(); // the first bash call is running (a second): the rest of the run happens while disconnected
      }
    },
  });
  agent.addMessage({ id: "u1", role: "user", content: script(bash("sleep 1"), bash("sleep 1")) });
  await agent.runAgent().catch(() => undefined); // the run ended early (HttpAgent may or may not call it an error)
  const cursor = agent.cursor;
  assert.ok(cursor !== undefined, "a cursor was kept");
  await agent.connectAgent();
  assert.deepEqual(net.lastEventIds, [null, cursor]);

  // The whole run as a fresh stream gets it (the same run posted again, no cursor): the same events in order.
  const runId = (seen.find((e) => e.type === "RUN_STARTED") as unknown as { runId: string }).runId;
  const whole = (await replay(sid, runId, script(bash("sleep 1"), bash("sleep 1")))).filter(relayed);
  assert.deepEqual(seen.filter(relayed).map(identity), whole.map(identity));
  const ids = agent.messages.map((m) => m.id);
  assert.equal(new Set(ids).size, ids.length, "no message twice");
});

/** The events of run `runId` posted again without a cursor, read as raw SSE `data:` frames. */
async function replay(sid: string, runId: string, content: string): Promise<BaseEvent[]> {
  const resp = await alice.request("POST", `/sessions/${encodeURIComponent(sid)}/ag-ui`, {
    json: { threadId: sid, runId, messages: [{ id: "u1", role: "user", content }] },
    headers: { Accept: "text/event-stream" },
  });
  const frames = (await resp.text()).split("\n\n");
  return frames.flatMap((f) => f.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)) as BaseEvent));
}
