// What the client's tests share: the two users' clients on the stack under test (GAMMA_BASE_URL,
// GAMMA_TOKEN, GAMMA_OTHER_TOKEN), and helpers to read frames and refusals.
import assert from "node:assert/strict";

import { GammaClient, GammaError } from "../src/client.mjs";
import type { Frame } from "../src/events.mjs";

export const baseUrl = process.env.GAMMA_BASE_URL ?? "http://127.0.0.1:8000";
export const token = process.env.GAMMA_TOKEN ?? "gamma-local-dev-token";
export const alice = new GammaClient({ baseUrl, token });
export const bob = new GammaClient({ baseUrl, token: process.env.GAMMA_OTHER_TOKEN ?? "" });

export async function refused(promise: Promise<unknown>): Promise<GammaError> {
  const err = await promise.then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof GammaError, `expected a GammaError, got ${String(err)}`);
  return err;
}

/** Frames until `until` matches one (inclusive); the iterator stays open for the next call. */
export async function collect(frames: AsyncIterator<Frame>, until: (f: Frame) => boolean): Promise<Frame[]> {
  const seen: Frame[] = [];
  for (;;) {
    const next = await frames.next();
    if (next.done) return seen;
    seen.push(next.value);
    if (until(next.value)) return seen;
  }
}

export const isEvent = (type: string) => (f: Frame) => f.kind === "event" && f.event.type === type;
export const isEnd = isEvent("agent_end");

/** An AbortController that also fires after `ms` (a bound on every stream a test opens). */
export function bounded(ms: number): { signal: AbortSignal; done: () => void } {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), ms);
  return { signal: controller.signal, done: () => { clearTimeout(timer); controller.abort(); } };
}

/** A scripted prompt (scripted/README.md "Scenarios"): step i answers the i-th model call. */
export function script(...steps: unknown[]): string {
  return "script:" + JSON.stringify(steps);
}

/** A model step calling `bash` with `command` (it runs in the session's sandbox). */
export function bash(command: string): unknown {
  return { tool_calls: [{ name: "bash", arguments: { command, timeout: 120 } }] };
}
