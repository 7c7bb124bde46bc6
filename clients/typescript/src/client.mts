// A small fetch-based client of the Gamma proxy, typed by schema.d.ts (generated from docs/openapi.json by
// openapi-typescript: `make docs`). No dependencies: the platform's fetch, AbortController, TextDecoder.
import type { components, paths } from "./schema.js";

export type Schemas = components["schemas"];
type Ok<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  responses: { 200: { content: { "application/json": infer T } } };
} ? T : never;

export type SessionEvent = paths["/sessions/{sid}/events"]["get"]["responses"][200]["content"]["text/event-stream"];
export type FileWritten = Schemas["FileWritten"];
export type DocumentDeleted = Schemas["DocumentDeleted"];

/** A non-2xx answer: `status`, and the proxy's JSON error body (`{error, detail?}`) when it sent one. */
export class GammaError extends Error {
  constructor(readonly status: number, readonly body: unknown, readonly headers: Headers) {
    const message = typeof body === "object" && body !== null && "error" in body ? String(body.error) : `HTTP ${status}`;
    super(message);
    this.name = "GammaError";
  }
}

export interface ClientOptions {
  baseUrl: string;
  token: string;
  fetch?: typeof fetch;
}

/** A document and the revision it is at (its ETag): pass it back as `ifMatch` to write only over it. */
export interface Versioned<T> {
  value: T;
  etag: string;
}

const seg = encodeURIComponent;
const filePath = (path: string) => path.split("/").map(seg).join("/");

export class GammaClient {
  readonly #base: string;
  readonly #token: string;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    this.#base = options.baseUrl.replace(/\/+$/, "");
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** The raw response of an authenticated request; throws GammaError on a non-2xx answer. */
  async request(method: string, path: string, init: { body?: BodyInit; json?: unknown; headers?: Record<string, string>; signal?: AbortSignal } = {}): Promise<Response> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.#token}`, ...init.headers };
    let body = init.body;
    if (init.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(init.json);
    }
    const resp = await this.#fetch(this.#base + path, { method, headers, body, signal: init.signal });
    if (!resp.ok) {
      const text = await resp.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // not JSON: keep the text
      }
      throw new GammaError(resp.status, parsed, resp.headers);
    }
    return resp;
  }

  async #json<T>(method: string, path: string, init: Parameters<GammaClient["request"]>[2] = {}): Promise<T> {
    return (await (await this.request(method, path, init)).json()) as T;
  }

  createSession(body: Schemas["CreateSession"] = {}): Promise<Schemas["SessionView"]> {
    return this.#json("POST", "/sessions", { json: body });
  }

  getSession(sid: string): Promise<Ok<"/sessions/{sid}", "get">> {
    return this.#json("GET", `/sessions/${seg(sid)}`);
  }

  listSessions(): Promise<Ok<"/sessions", "get">> {
    return this.#json("GET", "/sessions");
  }

  /** A prompt; with `expected_run_id` it applies only while that run is the active one (else 409). */
  postMessage(sid: string, body: Schemas["PostMessage"]): Promise<Schemas["MessageAccepted"]> {
    return this.#json("POST", `/sessions/${seg(sid)}/messages`, { json: body });
  }

  abort(sid: string, expectedRunId?: string): Promise<Schemas["AbortResult"]> {
    const body: Schemas["AbortBody"] = expectedRunId === undefined ? {} : { expected_run_id: expectedRunId };
    return this.#json("POST", `/sessions/${seg(sid)}/abort`, { json: body });
  }

  transcript(sid: string): Promise<Ok<"/sessions/{sid}/transcript", "get">> {
    return this.#json("GET", `/sessions/${seg(sid)}/transcript`);
  }

  /** Upload a file into the session's workspace (bytes as they are). */
  uploadFile(sid: string, path: string, data: Uint8Array<ArrayBuffer> | ArrayBuffer | string | Blob): Promise<FileWritten> {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    return this.#json("PUT", `/sessions/${seg(sid)}/workspace/files/${filePath(path)}`, {
      body, headers: { "Content-Type": "application/octet-stream" },
    });
  }

  async readFile(sid: string, path: string): Promise<Uint8Array> {
    const resp = await this.request("GET", `/sessions/${seg(sid)}/workspace/files/${filePath(path)}`);
    return new Uint8Array(await resp.arrayBuffer());
  }

  async getDocument(sid: string, doc: string): Promise<Versioned<Schemas["StoredDeck"]>> {
    return this.#versioned(await this.request("GET", `/sessions/${seg(sid)}/documents/${seg(doc)}`));
  }

  /** Replace a document; with `ifMatch` (an ETag from a read) a concurrent change is a 409 instead. */
  async putDocument(sid: string, doc: string, deck: Schemas["Deck"], ifMatch?: string): Promise<Versioned<Schemas["StoredDeck"]>> {
    return this.#versioned(await this.request("PUT", `/sessions/${seg(sid)}/documents/${seg(doc)}`, {
      json: deck, headers: ifMatch === undefined ? {} : { "If-Match": ifMatch },
    }));
  }

  async patchDocument(sid: string, doc: string, patch: Record<string, unknown>, ifMatch?: string): Promise<Versioned<Schemas["StoredDeck"]>> {
    return this.#versioned(await this.request("PATCH", `/sessions/${seg(sid)}/documents/${seg(doc)}`, {
      json: patch, headers: ifMatch === undefined ? {} : { "If-Match": ifMatch },
    }));
  }

  deleteDocument(sid: string, doc: string, ifMatch?: string): Promise<DocumentDeleted> {
    return this.#json("DELETE", `/sessions/${seg(sid)}/documents/${seg(doc)}`, {
      headers: ifMatch === undefined ? {} : { "If-Match": ifMatch },
    });
  }

  async #versioned(resp: Response): Promise<Versioned<Schemas["StoredDeck"]>> {
    return { value: (await resp.json()) as Schemas["StoredDeck"], etag: resp.headers.get("ETag") ?? "" };
  }

  /** The session's events (see events.mts): resumes after a drop from the last id seen. */
  async openEvents(sid: string, lastEventId: string | undefined, signal: AbortSignal): Promise<Response> {
    return this.request("GET", `/sessions/${seg(sid)}/events`, {
      signal, headers: { Accept: "text/event-stream", ...(lastEventId ? { "Last-Event-ID": lastEventId } : {}) },
    });
  }
}
