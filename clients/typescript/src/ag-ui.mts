// An AG-UI agent for one Gamma session: `@ag-ui/client`'s HttpAgent pointed at POST /sessions/{id}/ag-ui, plus
// the reattach HttpAgent lacks (its connect() is not implemented). docs/integration.md "AG-UI".
import { HttpAgent, type BaseEvent, type RunAgentInput } from "@ag-ui/client";
import type { Observable } from "rxjs";

export interface GammaAgentConfig {
  baseUrl: string;
  token: string;
  sessionId: string;
  headers?: Record<string, string>;
  fetch?: (url: string, init: RequestInit) => Promise<Response>;
}

/** Where each event the harness sends stands in the session's event stream (services/proxy/agui_stream.py). */
export const CURSOR_KEY = "gammaCursor";

/**
 * HttpAgent on a Gamma session. `threadId` is the session id. The position of the last event applied (its
 * `metadata.gammaCursor`, a position in the session's event stream: HttpAgent drops SSE `id:` lines) is kept
 * as `cursor`; `connectAgent()` re-posts the last run's input with `Last-Event-ID: cursor`, and the harness,
 * which records every run once, sends no second prompt and streams the rest of that run after the cursor.
 */
export class GammaAgent extends HttpAgent {
  cursor: string | undefined;
  #lastInput: RunAgentInput | undefined;
  #resumeAfter: string | undefined;

  constructor(config: GammaAgentConfig) {
    const base = config.baseUrl.replace(/\/+$/, "");
    super({
      url: `${base}/sessions/${encodeURIComponent(config.sessionId)}/ag-ui`,
      threadId: config.sessionId,
      headers: { Authorization: `Bearer ${config.token}`, ...config.headers },
    });
    if (config.fetch !== undefined) this.fetch = config.fetch;
    this.subscribe({
      onEvent: ({ event }) => {
        const at = event.metadata?.[CURSOR_KEY];
        if (typeof at === "string") this.cursor = at;
      },
    });
  }

  /** The request HttpAgent makes, with `Last-Event-ID` when it reattaches (read when the request is made). */
  protected override requestInit(input: RunAgentInput): RequestInit {
    const init = super.requestInit(input);
    const after = this.#resumeAfter;
    this.#resumeAfter = undefined;
    if (after !== undefined) init.headers = { ...(init.headers as Record<string, string>), "Last-Event-ID": after };
    return init;
  }

  override run(input: RunAgentInput): Observable<BaseEvent> {
    this.#lastInput = input;
    this.cursor = undefined;
    return super.run(input);
  }

  /** Reattaches to the last run: its input again (same runId), after the cursor. */
  protected override connect(input: RunAgentInput): Observable<BaseEvent> {
    const last = this.#lastInput;
    if (last === undefined) return super.connect(input); // no run yet: HttpAgent's own answer (nothing to attach to)
    this.#resumeAfter = this.cursor;
    if (this.abortController.signal.aborted) this.abortController = new AbortController(); // after abortRun()
    return super.run(last);
  }
}
