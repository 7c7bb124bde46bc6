"""Configuration from the environment (the README's "Configuration" table lists every one)."""

from __future__ import annotations

import fnmatch
import functools
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, TypeAdapter, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.contracts.notifications import NOTIFICATION_TYPES
from shared.image_limits import ImageLimits
from shared.oidc import OidcConfig
from shared.pricing import ModelPrice, parse_prices

LOCAL_USER = "local"
LOCAL_TOKEN = "gamma-local-dev-token"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    redis_url: str = Field("redis://127.0.0.1:6379/0", validation_alias="REDIS_URL",
        description="The bus and the small shared state.")
    data_dir: Path = Field(Path("./data"), validation_alias="GAMMA_DATA_DIR",
        description="Session disk root (`sessions/{sid}/...`).")
    api_tokens: str = Field("", validation_alias="GAMMA_API_TOKENS",
        description="`user:token,user:token`.")
    service_token: str = Field("gamma-local-service-token", validation_alias="GAMMA_SERVICE_TOKEN",
        description="Bearer token of notification producers.")
    # Bearer JWTs from an identity provider (shared/oidc.py; deploy/README.md "Identity provider").
    oidc_issuer: str = Field("", validation_alias="GAMMA_OIDC_ISSUER",
        description="Accept bearer JWTs from this identity provider (`iss` checked); with the issuer set and "
                    "`GAMMA_API_TOKENS` unset there is no local token.")
    oidc_audience: str = Field("", validation_alias="GAMMA_OIDC_AUDIENCE",
        description="The `aud` the identity provider's JWTs must carry (required with `GAMMA_OIDC_ISSUER`).")
    oidc_jwks_url: str = Field("", validation_alias="GAMMA_OIDC_JWKS_URL",
        description="The IdP's key set; unset, `jwks_uri` from `{issuer}/.well-known/openid-configuration`.")
    oidc_user_claim: str = Field("sub", validation_alias="GAMMA_OIDC_USER_CLAIM",
        description="The JWT claim naming the user.")
    oidc_scope_claim: str = Field("scope", validation_alias="GAMMA_OIDC_SCOPE_CLAIM",
        description="The JWT claim (space-separated string or list) holding a token's scopes.")
    oidc_service_scope: str = Field("gamma.service", validation_alias="GAMMA_OIDC_SERVICE_SCOPE",
        description="The scope a notification producer's token must carry.")
    oidc_leeway_s: float = Field(30.0, ge=0, le=300, validation_alias="GAMMA_OIDC_LEEWAY_S",
        description="Clock leeway for `exp`/`nbf` (seconds).")
    oidc_jwks_min_refresh_s: float = Field(30.0, ge=0, validation_alias="GAMMA_OIDC_JWKS_MIN_REFRESH_S",
        description="Least time between two JWKS fetches an unknown `kid` triggers (seconds).")
    trace_client_context: bool = Field(
        False, validation_alias="GAMMA_TRACE_CLIENT_CONTEXT",
        description="With tracing on: continue the trace a client's `traceparent` names at the public services "
        "(a gateway that starts traces). Off, their trace headers are dropped and each request starts a trace "
        "sampled by our own sampler: a client cannot force sampling or choose trace ids.")

    proxy_port: int = Field(8000, validation_alias="GAMMA_PROXY_PORT",
        description="The proxy's public port.")
    notifications_port: int = Field(8001, validation_alias="GAMMA_NOTIFICATIONS_PORT",
        description="The notifications service's public port (notification producers).")
    runtime_port: int = Field(8002, validation_alias="GAMMA_RUNTIME_PORT",
        description="The runtime's health/metrics port (a further worker of `make run` on + 10, + 20, ...).")
    digest_port: int = Field(8003, validation_alias="GAMMA_DIGEST_PORT",
        description="The digest service's health/metrics port.")
    compaction_port: int = Field(8004, validation_alias="GAMMA_COMPACTION_PORT",
        description="The compaction service's health/metrics port.")
    connectors_port: int = Field(8005, validation_alias="GAMMA_CONNECTOR_PORT",
        description="The example connector's health port (`services/connectors/example`).")
    brand_dir: str = Field("", validation_alias="GAMMA_BRAND_DIR",
        description="The example connector's asset directory; empty: the sample in its package.")
    notifications_url: str = Field("", validation_alias="GAMMA_NOTIFICATIONS_URL",
        description="Where a connector reaches the notifications service (registration, results); empty: this host "
                    "on `GAMMA_NOTIFICATIONS_PORT`.")
    host: str = Field("127.0.0.1", validation_alias="GAMMA_HOST",
        description="Bind address (`0.0.0.0` in containers).")
    # Log where an inbox entry's and a file write's time goes (bench/e2e.py --trace).
    trace_inbox: bool = Field(False, validation_alias="GAMMA_TRACE_INBOX",
        description="Log where an inbox entry's, a file write's and a live PUT's time goes (`bench/e2e.py --trace`).")
    # The skills the runtime loads and the sandbox mounts (services/runtime/paths.py); unset: <repo>/skills.
    skills_dir: Path | None = Field(None, validation_alias="GAMMA_SKILLS_DIR",
        description="The skills the runtime loads and the sandbox mounts (`services/runtime/paths.py`); unset: the "
                    "repository's `skills/`.")

    idle_s: float = Field(300.0, validation_alias="GAMMA_IDLE_S",
        description="Idle seconds before a live session goes dormant.")
    lease_ms: int = Field(10_000, validation_alias="GAMMA_LEASE_MS",
        description="Length of a session lease held by a runtime worker (ms).")
    claim_idle_ms: int = Field(5_000, validation_alias="GAMMA_CLAIM_IDLE_MS",
        description="A pending stream entry idle this long is reclaimed by another consumer (ms).")
    max_deliveries: int = Field(5, validation_alias="GAMMA_MAX_DELIVERIES",
        description="Deliveries of one stream entry before it goes to the dead-letter stream.")
    digest_debounce_ms: int = Field(300, validation_alias="GAMMA_DIGEST_DEBOUNCE_MS",
        description="The digest's debounce of a session's changes (ms).")
    # A consumer group with waiting entries whose last-delivered id has not moved this long is stalled.
    consumer_stall_s: float = Field(60.0, validation_alias="GAMMA_CONSUMER_STALL_S",
        description="A consumer group with waiting entries whose last-delivered id has not moved this long counts as "
                    "stalled (/readyz, metrics).")
    reply_timeout_s: float = Field(10.0, validation_alias="GAMMA_REPLY_TIMEOUT_S",
        description="How long the proxy waits for the runtime's answer to a forwarded write (seconds).")
    sse_heartbeat_s: float = Field(15.0, validation_alias="GAMMA_SSE_HEARTBEAT_S",
        description="Seconds between SSE heartbeats.")

    max_body_bytes: int = Field(2 * 1024 * 1024, validation_alias="GAMMA_MAX_BODY_BYTES",
        description="Largest request body (413).")
    max_file_bytes: int = Field(1024 * 1024, validation_alias="GAMMA_MAX_FILE_BYTES",
        description="Largest file one write may put (413).")

    # Per-session workspace quota (tool writes, bash, HTTP PUT): bytes and regular files.
    workspace_max_bytes: int = Field(100 * 1024 * 1024, validation_alias="GAMMA_WORKSPACE_MAX_BYTES",
        description="Per-session workspace quota in bytes of regular files; a tool write or `PUT` that would grow the"
                    " workspace past it gets 507 (nothing written); for `bash` also the file-size rlimit.")
    workspace_max_files: int = Field(2000, validation_alias="GAMMA_WORKSPACE_MAX_FILES",
        description="Per-session workspace quota in non-directory entries (507 past it).")
    # Every entry counts (directories, links, FIFOs too), and nesting is bounded: what a command can
    # build is what every walk of the workspace must get through (shared/walk.py).
    workspace_max_entries: int = Field(10_000, ge=1, validation_alias="GAMMA_WORKSPACE_MAX_ENTRIES",
        description="Per-session bound on entries of every kind (directories, links, FIFOs, sockets, files): a write "
                    "past it gets 507; an entry flood a `bash` call made is removed.")
    workspace_max_depth: int = Field(64, ge=1, le=512, validation_alias="GAMMA_WORKSPACE_MAX_DEPTH",
        description="Per-session bound on nesting levels: a path deeper gets 400; after a `bash` call, what nests "
                    "deeper is removed.")
    workspace_walk_budget_s: float = Field(5.0, gt=0, validation_alias="GAMMA_WORKSPACE_WALK_BUDGET_S",
        description="The longest one walk of a workspace may take (`shared/walk.py`: quota checks, the change scan "
                    "around `bash`, the files projected at a wake, recursive deletes); past it the walk stops and "
                    "says so, it never fails the call or the wake.")

    # Agent commands (services/runtime/sandbox): auto | bwrap | landlock | off.
    sandbox: str = Field("auto", validation_alias="GAMMA_SANDBOX",
        description="Agent-command sandbox: `auto` (strongest working layer), `bwrap`, `landlock`, `off` (unconfined;"
                    " explicit only).")
    sandbox_memory_bytes: int = Field(1024 * 1024 * 1024, validation_alias="GAMMA_SANDBOX_MEMORY_BYTES",
        description="Per process of a sandboxed command: address space (bytes).")
    sandbox_cpu_s: int = Field(120, validation_alias="GAMMA_SANDBOX_CPU_S",
        description="Per process of a sandboxed command: CPU seconds.")
    sandbox_max_procs: int = Field(256, validation_alias="GAMMA_SANDBOX_MAX_PROCS",
        description="Processes of one sandboxed call.")
    sandbox_max_open_files: int = Field(256, validation_alias="GAMMA_SANDBOX_MAX_OPEN_FILES",
        description="Open files per process of a sandboxed call.")

    # --- hostile-input limits (docs/architecture.md "Limits on hostile input"); each area appends its own settings below its own heading.

    openai_api_key: str | None = Field(None, validation_alias="OPENAI_API_KEY",
        description="The model server's key; unset: no model unless `GAMMA_MODEL_FACTORY` names one (the launchers "
                    "wire the scripted model's).")
    openai_base_url: str | None = Field(None, validation_alias="OPENAI_BASE_URL",
        description="Any OpenAI-compatible server; unset: OpenAI.")
    model: str = Field("gpt-5-mini", validation_alias=AliasChoices("GAMMA_MODEL"),
        description="The model of new sessions (the request's `model` wins).")
    context_window: int = Field(128_000, validation_alias="GAMMA_CONTEXT_WINDOW",
        description="The model's context window (tokens): the compaction threshold is this minus "
                    "`GAMMA_RESERVE_TOKENS`.")
    reserve_tokens: int = Field(16_384, validation_alias="GAMMA_RESERVE_TOKENS",
        description="Tokens kept free for the reply and the summary: compaction starts past the window minus these.")
    keep_recent_tokens: int = Field(20_000, validation_alias="GAMMA_KEEP_RECENT_TOKENS",
        description="Tokens of recent conversation a compaction keeps verbatim (where it cuts).")
    # After a failed summary the threshold does not ask again for this many model calls or seconds
    # (whichever ends first; doubled per consecutive failure, up to 8x).
    compaction_retry_calls: int = Field(4, validation_alias="GAMMA_COMPACTION_RETRY_CALLS",
        description="After a failed summary the threshold does not ask again for this many model calls (doubled per "
                    "consecutive failure, up to 8x).")
    compaction_retry_s: float = Field(60.0, validation_alias="GAMMA_COMPACTION_RETRY_S",
        description="After a failed summary the threshold does not ask again for this many seconds or "
                    "`GAMMA_COMPACTION_RETRY_CALLS` model calls, whichever ends first (doubled per consecutive "
                    "failure, up to 8x).")
    # A request unanswered this long no longer counts as in flight (a new one may go out).
    compaction_timeout_s: float = Field(120.0, validation_alias="GAMMA_COMPACTION_TIMEOUT_S",
        description="A compaction request unanswered this long no longer counts as in flight (a new one may go out).")

    instance: str = Field("", validation_alias=AliasChoices("GAMMA_INSTANCE", "HOSTNAME"),
        description="This replica's name in its consumer names (the pod name, `HOSTNAME`); unset: the host name.")

    # --- quotas and stream growth (docs/architecture.md "Limits on hostile input")
    # Sessions one user may own (a deleted session no longer counts).
    max_sessions_per_user: int = Field(1000, ge=1, validation_alias="GAMMA_MAX_SESSIONS_PER_USER",
        description="Sessions one user may own (403 past it; a deleted session no longer counts).")
    # Session creations per user per minute (fixed one-minute windows); 429 with Retry-After above it.
    session_creates_per_minute: int = Field(60, ge=1, validation_alias="GAMMA_SESSION_CREATES_PER_MINUTE",
        description="Session creations per user per minute (fixed one-minute windows; 429 with Retry-After past it).")
    # How often each service trims the streams it consumes down to what its groups have acknowledged.
    stream_trim_interval_s: float = Field(5.0, gt=0, validation_alias="GAMMA_STREAM_TRIM_INTERVAL_S",
        description="How often each service trims the streams it consumes down to what its groups have acknowledged "
                    "(seconds).")
    # shared/gcpolicy.py: every this many seconds the surviving young objects are frozen (out of the
    # gen-2 collections' scan; 0: off), and every GAMMA_GC_FULL_S the heap is unfrozen and collected once.
    gc_freeze_s: float = Field(5.0, ge=0, validation_alias="GAMMA_GC_FREEZE_S",
        description="Every this many seconds the surviving young objects are frozen, out of the gen-2 collections' "
                    "scan (`shared/gcpolicy.py`); 0: off.")
    gc_full_s: float = Field(600.0, gt=0, validation_alias="GAMMA_GC_FULL_S",
        description="Every this many seconds the heap is unfrozen and collected once (`shared/gcpolicy.py`).")
    gc_full_growth: float = Field(0.25, gt=0, validation_alias="GAMMA_GC_FULL_GROWTH",
        description="A full collection also runs once the frozen heap has grown by this fraction since the last one "
                    "(closed sessions' cycles; `shared/gcpolicy.py`).")
    # Threads of each service's default executor (asyncio.to_thread): blocking disk I/O, mostly fsync
    # waits, so far more than the cores (shared/iopool.py; Python's default is 6 on 2 cores).
    io_threads: int = Field(64, ge=1, le=1024, validation_alias="GAMMA_IO_THREADS",
        description="Threads of each service's default executor (`asyncio.to_thread`: fsyncs, blob and page reads; "
                    "Python's own default is cpus + 4), `shared/iopool.py`.")
    disk_probe_s: float = Field(2.0, gt=0, validation_alias="GAMMA_DISK_PROBE_S",
        description="How often each service probes the session disk (`shared/diskhealth.py`; `/readyz`, gauges).")
    disk_probe_timeout_s: float = Field(5.0, gt=0, validation_alias="GAMMA_DISK_PROBE_TIMEOUT_S",
        description="A disk probe slower than this counts the disk as failing (seconds).")
    disk_min_free_bytes: int = Field(1024 * 1024, ge=0, validation_alias="GAMMA_DISK_MIN_FREE_BYTES",
        description="Free bytes under which the session disk counts as full (no new lease; `/readyz` degraded).")
    # Content blobs (.blobs) older than this are orphans (their change was never published).
    blob_orphan_s: float = Field(3600.0, gt=0, validation_alias="GAMMA_BLOB_ORPHAN_S",
        description="Age after which an unclaimed content blob (its change never published) is removed (seconds).")
    # --- UI documents (docs/architecture.md "Limits on hostile input"): one Yjs update, the merged document's encoded size, and the
    # JSON values in its snapshot. Hit: 413 (bytes) / 422 (items). The document cap also bounds the
    # nesting pycrdt's JSON export recurses through (see shared/uidoc.py), hence its upper bound.
    ui_max_update_bytes: int = Field(256 * 1024, ge=1024, validation_alias="GAMMA_UI_MAX_UPDATE_BYTES",
        description="Largest Yjs update of a session's UI state, live and dormant alike (413); see \"UI documents\".")
    ui_max_document_bytes: int = Field(256 * 1024, ge=1024, le=1024 * 1024,
                                       validation_alias="GAMMA_UI_MAX_DOCUMENT_BYTES",
        description="Largest encoded merged UI document (413); at most 1 MiB, which also bounds the nesting the JSON "
                    "export recurses through.")
    ui_max_items: int = Field(5000, ge=100, validation_alias="GAMMA_UI_MAX_ITEMS",
        description="JSON values in a UI document's snapshot (422).")
    # --- request intake limits (docs/architecture.md "Limits on hostile input"): JSON bodies and request heads, proxy and
    # notifications. The depth stays well under pydantic's own parser limit (200), which the runtime
    # meets again when it reads a body wrapped in its inbox entry.
    max_json_depth: int = Field(64, ge=2, le=150, validation_alias="GAMMA_MAX_JSON_DEPTH",
        description="Nesting depth of every JSON body, proxy and notifications (422; at most 150, under pydantic's "
                    "own parser limit).")
    max_json_number_digits: int = Field(100, ge=20, le=4000, validation_alias="GAMMA_MAX_JSON_NUMBER_DIGITS",
        description="Digits per number of every JSON body, proxy and notifications (422).")
    # Request line plus header fields, in bytes and fields, per request, on every service port (431).
    max_header_bytes: int = Field(64 * 1024, ge=4096, validation_alias="GAMMA_MAX_HEADER_BYTES",
        description="Request line plus header fields, in bytes, on every service port (431, connection closed).")
    max_headers: int = Field(100, ge=10, validation_alias="GAMMA_MAX_HEADERS",
        description="Header fields per request on every service port (431, connection closed).")
    # --- streams (docs/architecture.md "Limits on hostile input"): SSE fan-out, transcript paging, internal metrics ports.
    # Open event streams per user and proxy process (429 past it); entries queued for one SSE client
    # before it counts as too slow and is closed (it resumes with Last-Event-ID).
    sse_max_streams_per_user: int = Field(16, ge=1, validation_alias="GAMMA_SSE_MAX_STREAMS_PER_USER",
        description="Open event streams per user and proxy process (429 past it).")
    sse_queue_size: int = Field(1000, ge=1, validation_alias="GAMMA_SSE_QUEUE_SIZE",
        description="Events queued for one SSE client before it is closed as too slow (it resumes with "
                    "`Last-Event-ID`).")
    # GET /transcript pages: at most this many entries, and no more bytes than this (at least one entry).
    transcript_page_max: int = Field(500, ge=1, validation_alias="GAMMA_TRANSCRIPT_PAGE_MAX",
        description="`GET /transcript` page cap in entries; `limit` above it is a 400.")
    transcript_page_bytes: int = Field(1024 * 1024, ge=1024, validation_alias="GAMMA_TRANSCRIPT_PAGE_BYTES",
        description="`GET /transcript` page cap in bytes (at least one entry).")
    # /metrics of the public services (proxy, notifications) is served only on these internal ports.
    proxy_metrics_port: int = Field(8100, validation_alias="GAMMA_PROXY_METRICS_PORT",
        description="The proxy's internal port: `/metrics`, `/docs` (not on the public port).")
    notifications_metrics_port: int = Field(8101, validation_alias="GAMMA_NOTIFICATIONS_METRICS_PORT",
        description="The notifications service's internal port: `/metrics`, `/docs` (not on the public port).")
    # --- agent command sandbox (README "Security"): size of the private /tmp and HOME of a sandboxed command.
    sandbox_tmp_bytes: int = Field(64 * 1024 * 1024, validation_alias="GAMMA_SANDBOX_TMP_BYTES",
        description="Size of a sandboxed command's private `/tmp` and `HOME` (bwrap).")

    # --- model APIs (README "Models"): Responses or Chat Completions, output cap, retries of 429/5xx.
    # Unset: `responses` for OpenAI itself (no OPENAI_BASE_URL, or api.openai.com), `chat` otherwise.
    model_api: Literal["responses", "chat"] | None = Field(None, validation_alias="GAMMA_MODEL_API",
        description="The model API of new sessions (`responses` or `chat`); unset: `responses` for OpenAI itself (no "
                    "`OPENAI_BASE_URL`, or api.openai.com), `chat` otherwise. A session keeps the one it was created "
                    "with (`model.api` on `POST /sessions` overrides).")
    max_output_tokens: int = Field(32_000, ge=16, le=1_000_000, validation_alias="GAMMA_MAX_OUTPUT_TOKENS",
        description="`max_output_tokens` of Responses requests; a reply cut there is continued once, then an error.")
    model_max_retries: int = Field(4, ge=0, le=20, validation_alias="GAMMA_MODEL_MAX_RETRIES",
        description="Retries of a model call on 429, 5xx and dropped connections (Retry-After honoured, else "
                    "exponential backoff); then an `error` event and the run ends.")
    model_retry_base_s: float = Field(1.0, ge=0.0, le=60.0, validation_alias="GAMMA_MODEL_RETRY_BASE_S",
        description="The backoff base of model call retries (seconds).")
    model_retry_max_s: float = Field(60.0, ge=0.0, le=600.0, validation_alias="GAMMA_MODEL_RETRY_MAX_S",
        description="The cap of one wait between model call retries (seconds).")
    # The openai client's HTTP backend for a real endpoint (OPENAI_API_KEY set). `aiohttp` (the SDK's
    # DefaultAioHttpClient): its C parser reads a token-per-chunk stream at ~60% of httpx/h11's CPU,
    # and returns what a connection buffered in one read, which the runtime's read gate needs
    # (engine/sse.py); with `httpx` the streams are read chunk by chunk, ungated (bench/stream_micro.py).
    model_http: Literal["aiohttp", "httpx"] = Field("aiohttp", validation_alias="GAMMA_MODEL_HTTP",
        description="The `openai` client's HTTP backend for a real endpoint: `aiohttp` "
                    "(`openai.DefaultAioHttpClient`: ~40% less CPU per streamed token than httpx's own, and reads "
                    "gated per tick) or `httpx`.")
    model_max_connections: int = Field(4096, ge=1, le=100_000, validation_alias="GAMMA_MODEL_MAX_CONNECTIONS",
        description="Connections (all kept alive) of a runtime worker's model client: one per streaming session.")
    # Where the runtime and the compaction service get their model client (shared/model.py
    # `model_client`): `module:function`, a ModelFactory; empty = the OpenAI client (OPENAI_API_KEY).
    # The dev/test launchers (services/stack.py, tests/support/stack.py) name the scripted model's.
    model_factory: str = Field("", max_length=200, pattern=r"^([\w.]+:\w+)?$", validation_alias="GAMMA_MODEL_FACTORY",
        description="Where the runtime and compaction get their model client (`shared/model.py`): `module:function` "
                    "of a ModelFactory; empty: the OpenAI client. `make run`, the tests and compose name "
                    "`scripted.factory:model_factory` (README \"Models\").")
    # --- trusted transport (docs/architecture.md "Trust boundaries"): the role the harness's injections
    # and anchors are sent with. `developer`: a channel user text cannot imitate; `user`: for servers or
    # models that reject the developer role (reserved tags in user text and tool output are neutralised
    # either way). Unset: `developer` for OpenAI itself and every Responses session, `user` for Chat
    # Completions on another server (many chat templates know only system/user/assistant/tool).
    trusted_role: Literal["developer", "user"] | None = Field(None, validation_alias="GAMMA_TRUSTED_ROLE",
        description="The role the harness's injections and anchors are sent with (`developer` or `user`; see "
                    "\"Security\": trusted transport).")
    # Models (comma-separated fnmatch patterns, e.g. `llama-*,qwen*`) sent user-role whatever the above says.
    trusted_role_user_models: str = Field("", max_length=4096, validation_alias="GAMMA_TRUSTED_ROLE_USER_MODELS",
        description="Comma-separated `fnmatch` patterns of model names whose sessions use the `user` role whatever "
                    "`GAMMA_TRUSTED_ROLE` says (models or servers that reject `developer`).")

    # --- images (docs/architecture.md "Images"): what the agent sees of image files and attachments.
    # `detail` goes with every image part; the sides are OpenAI's high-detail fit (long, then short).
    image_detail: Literal["auto", "low", "high"] = Field("auto", validation_alias="GAMMA_IMAGE_DETAIL",
        description="The `detail` of every image part sent to the model (`auto`, `low`, `high`).")
    image_max_long: int = Field(2048, ge=64, le=8192, validation_alias="GAMMA_IMAGE_MAX_LONG",
        description="An image is downscaled (aspect ratio kept) until its long side fits this (pixels).")
    image_max_short: int = Field(768, ge=64, le=8192, validation_alias="GAMMA_IMAGE_MAX_SHORT",
        description="An image is downscaled (aspect ratio kept) until its short side fits this (pixels).")
    image_max_source_bytes: int = Field(20 * 1024 * 1024, ge=1024, validation_alias="GAMMA_IMAGE_MAX_SOURCE_BYTES",
        description="An image file past this is refused (a `read` error result, a 413 for an attachment) before it is"
                    " decoded.")
    image_max_pixels: int = Field(50_000_000, ge=1, validation_alias="GAMMA_IMAGE_MAX_PIXELS",
        description="An image past this many pixels is refused (a `read` error result, a 413 for an attachment) "
                    "before it is decoded.")
    images_gc_grace_s: float = Field(3600.0, ge=0, validation_alias="GAMMA_IMAGES_GC_GRACE_S",
        description="An image no transcript entry names is removed when its session closes, once older than this "
                    "(`shared/image_gc.py`; a prompt's attachments are stored before the prompt is recorded).")
    # Attachments of one message: how many files, and their bytes together.
    attachments_max: int = Field(10, ge=0, le=100, validation_alias="GAMMA_ATTACHMENTS_MAX",
        description="Files attached to one message.")
    attachments_max_bytes: int = Field(40 * 1024 * 1024, ge=1024, validation_alias="GAMMA_ATTACHMENTS_MAX_BYTES",
        description="Bytes of the files attached to one message, together.")

    # --- streaming at scale: the runtime's coalescing of streamed text deltas.
    # Streamed text deltas of a session queued within this window go out as one event (one XADD),
    # and the runtime sends the windows of all its sessions in one pipeline per window (sender.py);
    # 0: one event per delta (each its own XADD, pipelined with whatever else is queued). 30 ms at
    # 80 tokens/s: ~2.4 tokens per XADD, a token waits 15 ms on average (bench-stream).
    delta_coalesce_ms: float = Field(30.0, ge=0, le=1000, validation_alias="GAMMA_DELTA_COALESCE_MS",
        description="Streamed text deltas of a session within this window go out as one `message_update` event (one "
                    "XADD) instead of one per token, and a runtime worker sends the windows of all its sessions in "
                    "one pipeline per window; awaited events are never held by it; 0 = one event per delta. The same "
                    "tick paces the reads of the model streams (each read waits for the tick, 2 ms ahead of it, and "
                    "takes all that arrived), where the client returns all that arrived in one read "
                    "(`GAMMA_MODEL_HTTP=aiohttp`).")
    # The window adapts to the load (sender.py): with few streaming sessions a worker ticks every
    # GAMMA_DELTA_COALESCE_MIN_MS, growing so that one event per streaming session per tick stays
    # within GAMMA_DELTA_SENDS_PER_S, up to GAMMA_DELTA_COALESCE_MS (reached at 135 streaming
    # sessions by default). GAMMA_DELTA_SENDS_PER_S=0: the window is always GAMMA_DELTA_COALESCE_MS.
    delta_coalesce_min_ms: float = Field(10.0, ge=1, le=1000, validation_alias="GAMMA_DELTA_COALESCE_MIN_MS",
        description="The window with few streaming sessions: a runtime worker ticks this often, and the window grows "
                    "with the number of its streaming sessions (one event per session per tick within "
                    "`GAMMA_DELTA_SENDS_PER_S`) up to `GAMMA_DELTA_COALESCE_MS`.")
    delta_sends_per_s: float = Field(4500.0, ge=0, le=1_000_000, validation_alias="GAMMA_DELTA_SENDS_PER_S",
        description="A runtime worker's budget of streamed-text events (XADDs) per second that sets its window "
                    "between the two above (the full window from 135 streaming sessions, kept while they end); 0 = "
                    "always `GAMMA_DELTA_COALESCE_MS`.")
    # `make run`: runtime worker processes (they share the sessions by lease); 0 = one per CPU core.
    # One worker's event loop is the bottleneck of a saturated stack (bench-e2e, docs/architecture.md "Streaming at scale").
    runtime_workers: int = Field(0, ge=0, le=64, validation_alias="GAMMA_RUNTIME_WORKERS",
        description="Runtime worker processes `make run` starts; the second listens on `GAMMA_RUNTIME_PORT` + 10, the"
                    " third + 20, ... (compose: `deploy.replicas` of `runtime`, 2).")
    # Wakes a runtime worker reads and handles at once (services/runtime/app.py): a wake mostly waits
    # (lease, disk fence fsync, restore, SessionLive), ~30-100 ms, so one at a time queued a burst.
    runtime_wakes_at_once: int = Field(8, ge=1, le=256, validation_alias="GAMMA_RUNTIME_WAKES_AT_ONCE",
        description="Wakes a runtime worker reads and handles at once (`services/runtime/app.py`): a wake mostly "
                    "waits (lease, disk fence, restore), so one at a time queued a burst.")
    # --- dormant sessions in Redis (docs/integration.md "Dormant sessions in Redis") ---
    # How long a dormant session's events stream (SSE replay) and drained inbox stay in Redis; after
    # it only the session row, its fence, and the user's index (plus digest/notification state) remain.
    dormant_retention_s: float = Field(300.0, ge=0.0, le=7 * 24 * 3600, validation_alias="GAMMA_DORMANT_RETENTION_S",
        description="How long a dormant session's events stream and drained inbox stay in Redis (the SSE replay "
                    "window; afterwards a resuming client gets an SSE `reset` and reloads GET /transcript).")
    # How often each runtime worker sweeps the dormant sessions whose retention ended.
    dormant_sweep_interval_s: float = Field(10.0, gt=0, le=3600, validation_alias="GAMMA_DORMANT_SWEEP_INTERVAL_S",
        description="How often each runtime worker sweeps the dormant sessions whose retention ended (seconds).")
    # --- workspace snapshots (shared/snapshots.py; docs/architecture.md "Snapshots, rewind and fork") ---
    # Per session: records older than this, past this many bytes of stored contents, or past this many
    # records are pruned (oldest first); rewinding to a point before the oldest kept one is a 409.
    snapshot_retention_s: float = Field(7 * 24 * 3600.0, gt=0, validation_alias="GAMMA_SNAPSHOT_RETENTION_S",
        description="Per session: workspace snapshots older than this are pruned (seconds); a rewind or fork to a "
                    "point before the oldest kept one is a 409 (docs/architecture.md \"Snapshots, rewind and fork\").")
    snapshot_max_bytes: int = Field(512 * 1024 * 1024, ge=1024 * 1024, validation_alias="GAMMA_SNAPSHOT_MAX_BYTES",
        description="Per session: workspace snapshots past these bytes of stored contents are pruned, oldest first "
                    "(to 80% of the limit).")
    snapshot_max_records: int = Field(2000, ge=10, validation_alias="GAMMA_SNAPSHOT_MAX_RECORDS",
        description="Per session: workspace snapshots past this many records are pruned, oldest first (to 80% of the "
                    "limit).")
    # --- Redis Cluster (README "Redis Cluster"; 5): read where the clients are built (shared/redis_cluster.py),
    # declared here for the settings table and the deploy checks.
    # Unset: REDIS_URL's node is asked `INFO cluster` at start-up; 1 forces a cluster client, 0 a single one.
    redis_cluster: bool | None = Field(None, validation_alias="GAMMA_REDIS_CLUSTER",
        description="`1` forces a Redis Cluster client, `0` a single-node one; unset, the node `REDIS_URL` names is "
                    "asked `INFO cluster` at start-up.")
    # More nodes of the cluster (`host:port,host:port`): a service (re)started while the node REDIS_URL
    # names is down reaches the cluster through these.
    redis_cluster_nodes: str = Field("", validation_alias="GAMMA_REDIS_CLUSTER_NODES",
        description="More cluster nodes (`host:port,...`): a service (re)started while the node `REDIS_URL` names is "
                    "down reaches the cluster through them.")
    # On a cluster, after a write acknowledged to a client (inbox append, notification, lease, service
    # stream entry): WAIT for one replica at most this long (ms); 0 turns it off.
    redis_wait_ms: int = Field(250, ge=0, le=10_000, validation_alias="GAMMA_REDIS_WAIT_MS",
        description="On a cluster: after a write acknowledged to a client, `WAIT` this long (ms) for one replica; 0 "
                    "turns it off.")

    # --- scoped knowledge, skill rules, dynamic tools (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools") ---
    # Knowledge hints at each prompt: at most this many notes, each with a BM25 score (name + scope
    # against the prompt) of at least this; a note body longer than this many characters is returned
    # by read_workspace_rule as a workspace file instead of inline.
    knowledge_top_k: int = Field(5, ge=0, le=50, validation_alias="GAMMA_KNOWLEDGE_TOP_K",
        description="Knowledge hints at a prompt: at most this many notes.")
    knowledge_min_score: float = Field(0.1, ge=0, le=100, validation_alias="GAMMA_KNOWLEDGE_MIN_SCORE",
        description="Knowledge hints at a prompt: each note's BM25 score (name + scope against the prompt) at least "
                    "this.")
    knowledge_inline_chars: int = Field(16_000, ge=256, le=1_000_000, validation_alias="GAMMA_KNOWLEDGE_INLINE_CHARS",
        description="A note body longer than this is returned by `read_workspace_rule` as the workspace file "
                    "`knowledge/{id}.md`.")
    # Tool namespaces with an active subset (services/runtime/tool_policy.py); off: every tool, always.
    dynamic_tools: bool = Field(False, validation_alias="GAMMA_DYNAMIC_TOOLS",
        description="Tool namespaces with an active subset instead of the stable tool set (see \"Workspace knowledge, "
                    "skill rules, dynamic tools\").")
    max_connectors: int = Field(32, ge=1, le=1000, validation_alias="GAMMA_MAX_CONNECTORS",
        description="Connectors registered at once (docs/architecture.md \"Connectors\"); 422 past it.")

    # --- causal order of live writes (docs/architecture.md "Causal order"; shared/causal.py): a prompt waits at most this
    # long for the artifact updates of the writes acknowledged before it; 0 turns the wait off.
    causal_wait_ms: int = Field(2000, ge=0, le=60_000, validation_alias="GAMMA_CAUSAL_WAIT_MS",
        description="How long a prompt waits for the `artifact_update`s of the writes acknowledged before it (causal "
                    "order, docs/architecture.md); past it, it goes on after a dirty marker; `0` turns the wait off.")

    # --- session lifecycle (proxy): Idempotency-Key, delete, titles, export (docs/architecture.md
    # "Session lifecycle"). A key's stored response is replayed for this long; a user keeps at most
    # this many keys (the oldest go first); a request in flight holds its key at most this long (a
    # proxy that died mid-request frees it then); a response bigger than this is not stored.
    idempotency_ttl_s: int = Field(24 * 3600, ge=60, le=7 * 24 * 3600, validation_alias="GAMMA_IDEMPOTENCY_TTL_S",
        description="`Idempotency-Key`: how long a stored response is replayed (seconds; docs/architecture.md "
                    "\"Session lifecycle\").")
    idempotency_max_keys: int = Field(10_000, ge=10, le=1_000_000, validation_alias="GAMMA_IDEMPOTENCY_MAX_KEYS",
        description="`Idempotency-Key`: keys kept per user (the oldest go first).")
    idempotency_lease_s: int = Field(120, ge=5, le=3600, validation_alias="GAMMA_IDEMPOTENCY_LEASE_S",
        description="`Idempotency-Key`: how long a request in flight holds its key (a killed proxy's key frees itself"
                    " then).")
    idempotency_max_response_bytes: int = Field(256 * 1024, ge=1024, le=16 * 1024 * 1024,
                                                validation_alias="GAMMA_IDEMPOTENCY_MAX_RESPONSE_BYTES",
        description="`Idempotency-Key`: a response bigger than this is not stored.")
    # A deleted session's id is remembered this long (later writes and notifications: 410).
    deleted_retention_s: int = Field(30 * 24 * 3600, ge=60, validation_alias="GAMMA_DELETED_RETENTION_S",
        description="How long a deleted session's id is remembered (later writes and notifications: 404/410; "
                    "seconds).")
    # How often each proxy resumes deletes a dead proxy left half done.
    delete_sweep_interval_s: float = Field(30.0, gt=0, le=3600, validation_alias="GAMMA_DELETE_SWEEP_INTERVAL_S",
        description="How often each proxy resumes deletes a killed proxy left half done (seconds).")
    # GET /sessions/{id}/export refuses (413) a session whose files add up to more than this.
    export_max_bytes: int = Field(512 * 1024 * 1024, ge=1024, validation_alias="GAMMA_EXPORT_MAX_BYTES",
        description="`GET /sessions/{id}/export` refuses (413) a session whose files add up to more.")

    # --- notification urgency (services/notifications/policy.py): the notification types that wake a
    # dormant session (comma- or space-separated); none by default, so a notification waits for the
    # user's next wake. An unknown type fails at start, not silently at the first notification.
    urgent_notification_types: str = Field("", validation_alias="GAMMA_URGENT_NOTIFICATION_TYPES",
        description="Notification types that wake a dormant session (comma-separated, e.g. `approval.resolved`); an "
                    "unknown type fails at start; the others wait for the user's next wake.")

    @field_validator("skills_dir", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        return value or None

    @field_validator("urgent_notification_types")
    @classmethod
    def _known_types(cls, value: str) -> str:
        unknown = sorted(set(value.replace(",", " ").split()) - set(NOTIFICATION_TYPES))
        if unknown:
            raise ValueError(f"unknown notification type(s) {', '.join(unknown)}; known: {', '.join(NOTIFICATION_TYPES)}")
        return value

    # --- model prices for the UI state's cost records (shared/pricing.py): JSON, model ->
    # {input, cachedInput, output} in USD per million tokens, merged over the built-in table.
    model_prices: str = Field("", validation_alias="GAMMA_MODEL_PRICES",
        description="JSON `{model: {input, cachedInput, output}}` in USD per million tokens, merged over "
                    "`shared/pricing.py`'s table; prices the UI state's cost records (one per model, from the "
                    "transcript's recorded usage, rebuilt after each run and at a wake).")

    @field_validator("model_prices")
    @classmethod
    def _prices(cls, value: str) -> str:
        parse_prices(value)  # a malformed table fails at start
        return value

    @property
    def prices(self) -> dict[str, ModelPrice]:
        return parse_prices(self.model_prices)

    @property
    def urgent_types(self) -> frozenset[str]:
        return frozenset(self.urgent_notification_types.replace(",", " ").split())

    def tokens(self) -> dict[str, str]:
        """token -> user. With neither GAMMA_API_TOKENS nor an OIDC issuer set, one local user with a
        fixed token (an IdP-backed deployment gets no well-known token)."""
        if not self.api_tokens.strip():
            return {} if self.oidc_issuer else {LOCAL_TOKEN: LOCAL_USER}
        pairs: dict[str, str] = {}
        for item in self.api_tokens.split(","):
            user, _, token = item.strip().partition(":")
            if user and token:
                pairs[token] = user
        return pairs

    def oidc(self) -> OidcConfig | None:
        if not self.oidc_issuer:
            return None
        if not self.oidc_audience:
            raise ValueError("GAMMA_OIDC_ISSUER is set without GAMMA_OIDC_AUDIENCE")
        return OidcConfig(issuer=self.oidc_issuer, audience=self.oidc_audience, jwks_url=self.oidc_jwks_url,
                          user_claim=self.oidc_user_claim, scope_claim=self.oidc_scope_claim,
                          service_scope=self.oidc_service_scope, leeway_s=self.oidc_leeway_s,
                          min_refresh_s=self.oidc_jwks_min_refresh_s)

    @property
    def openai_endpoint(self) -> bool:
        """OpenAI itself (or a model factory's client that plays it, offline), not another compatible server."""
        base = (self.openai_base_url or "").strip()
        return not base or "://api.openai.com" in base

    @property
    def default_model_api(self) -> Literal["responses", "chat"]:
        if self.model_api is not None:
            return self.model_api
        return "responses" if self.openai_endpoint else "chat"

    def image_limits(self) -> ImageLimits:
        return ImageLimits(max_source_bytes=self.image_max_source_bytes, max_pixels=self.image_max_pixels,
                           max_long=self.image_max_long, max_short=self.image_max_short)

    def trusted_role_for(self, model: str, api: Literal["responses", "chat"]) -> Literal["developer", "user"]:
        """The role of a session's trusted messages: a model listed for user-role transport first, then
        GAMMA_TRUSTED_ROLE, then the API's default (see the field)."""
        patterns = [p.strip() for p in self.trusted_role_user_models.split(",") if p.strip()]
        if any(fnmatch.fnmatchcase(model, p) for p in patterns):
            return "user"
        if self.trusted_role is not None:
            return self.trusted_role
        return "developer" if api == "responses" or self.openai_endpoint else "user"


def load_settings() -> Settings:
    return Settings()


@functools.cache
def _field_reader(name: str) -> tuple[tuple[str, ...], TypeAdapter[Any], Any]:
    field = Settings.model_fields[name]
    alias = field.validation_alias
    names = (alias,) if isinstance(alias, str) else tuple(str(c) for c in getattr(alias, "choices", ()))
    typed: Any = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    return names, TypeAdapter(typed), field.default


def env_setting(name: str) -> Any:
    """One Settings field, read from the environment now and validated as Settings would: for the few
    low-level helpers that run without a Settings at hand (the Redis client builders, a consumer's
    name), where building all of Settings per call would cost milliseconds. Unset or empty: the default."""
    names, adapter, default = _field_reader(name)
    raw = next((os.environ[n] for n in names if os.environ.get(n, "").strip()), None)
    return default if raw is None else adapter.validate_python(raw.strip())
