// The session's event stream (GET /sessions/{sid}/events, text/event-stream): frames parsed from fetch's
// body, heartbeats surfaced and watched, and a dropped stream resumed from the last id seen
// (Last-Event-ID), as docs/integration.md describes for clients.
import { GammaClient, GammaError, type SessionEvent } from "./client.mjs";

export type Frame =
  | { kind: "event"; id: string; event: SessionEvent }
  | { kind: "reset"; id: string; data: unknown } // history was trimmed: reload it from GET /transcript
  | { kind: "heartbeat" }
  | { kind: "connected" }; // the stream is open: what happens from now on will arrive

interface RawFrame {
  id?: string;
  event?: string;
  data: string[];
  comments: string[];
  retry?: number;
}

export interface EventsOptions {
  lastEventId?: string;
  signal?: AbortSignal;
  /** No byte (heartbeats included) for this long: the connection is dead, reconnect (default 45 s). */
  heartbeatTimeoutMs?: number;
  /** Consecutive failed connections before giving up (default 10); a 4xx other than 429 is final. */
  maxReconnects?: number;
}

/** Split an SSE byte stream into frames (blank-line separated; `field: value` lines; `:` comments). */
export async function* parseSse(body: ReadableStream<Uint8Array>, onBytes: () => void = () => {}): AsyncGenerator<RawFrame> {
  const decoder = new TextDecoder();
  let buffer = "";
  let frame: RawFrame = { data: [], comments: [] };
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      onBytes();
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
        if (line === "") {
          if (frame.data.length || frame.comments.length || frame.id !== undefined) yield frame;
          frame = { data: [], comments: [] };
          continue;
        }
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "") frame.comments.push(value);
        else if (field === "data") frame.data.push(value);
        else if (field === "id") frame.id = value;
        else if (field === "event") frame.event = value;
        else if (field === "retry" && /^\d+$/.test(value)) frame.retry = Number(value);
      }
    }
  } finally {
    reader.releaseLock();
  }
}

const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal?.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
});

/** Iterate a session's frames; `lastEventId` always holds the resume point. */
export class EventSubscription implements AsyncIterable<Frame> {
  lastEventId: string | undefined;
  reconnects = 0;
  readonly #client: GammaClient;
  readonly #sid: string;
  readonly #options: EventsOptions;

  constructor(client: GammaClient, sid: string, options: EventsOptions = {}) {
    this.#client = client;
    this.#sid = sid;
    this.#options = options;
    this.lastEventId = options.lastEventId;
  }

  [Symbol.asyncIterator](): AsyncGenerator<Frame> {
    return this.#run();
  }

  async *#run(): AsyncGenerator<Frame> {
    const outer = this.#options.signal;
    const timeoutMs = this.#options.heartbeatTimeoutMs ?? 45_000;
    let failures = 0;
    let delayMs = 1000;
    while (!outer?.aborted) {
      const connection = new AbortController();
      let watchdog: ReturnType<typeof setTimeout> | undefined;
      // The caller's abort ends the watch too: a consumer that aborts and drops the iterator leaves it
      // parked at a `yield`, where `finally` does not run, and a pending watchdog would keep Node alive.
      const stop = () => { clearTimeout(watchdog); connection.abort(); };
      outer?.addEventListener("abort", stop, { once: true });
      watchdog = setTimeout(stop, timeoutMs);
      const alive = () => { clearTimeout(watchdog); watchdog = setTimeout(stop, timeoutMs); };
      try {
        const resp = await this.#client.openEvents(this.#sid, this.lastEventId, connection.signal);
        failures = 0;
        for await (const raw of parseSse(resp.body!, alive)) {
          if (raw.retry !== undefined) delayMs = raw.retry;
          const frame = this.#frame(raw);
          if (frame) yield frame;
        }
      } catch (err) {
        if (outer?.aborted) return;
        const final = err instanceof GammaError && err.status < 500 && err.status !== 429;
        if (final || ++failures > (this.#options.maxReconnects ?? 10)) throw err;
      } finally {
        clearTimeout(watchdog);
        outer?.removeEventListener("abort", stop);
        connection.abort();
      }
      if (outer?.aborted) return;
      this.reconnects += 1;
      await sleep(delayMs, outer);
    }
  }

  #frame(raw: RawFrame): Frame | undefined {
    if (raw.data.length === 0) {
      if (raw.comments.some((c) => c.startsWith("heartbeat"))) return { kind: "heartbeat" };
      return raw.comments.some((c) => c.startsWith("connected")) ? { kind: "connected" } : undefined;
    }
    const id = raw.id ?? this.lastEventId ?? "";
    this.lastEventId = id || this.lastEventId;
    const data: unknown = JSON.parse(raw.data.join("\n"));
    return raw.event === "reset" ? { kind: "reset", id, data } : { kind: "event", id, event: data as SessionEvent };
  }
}

export function sessionEvents(client: GammaClient, sid: string, options: EventsOptions = {}): EventSubscription {
  return new EventSubscription(client, sid, options);
}
