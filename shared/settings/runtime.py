"""Settings of the runtime workers (docs/architecture.md "Streaming at scale", "Causal order")."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from shared.settings.area import Area


class RuntimeSettings(Area):
    """The runtime workers: leases, dormancy, wakes, streamed deltas, causal order, skills and knowledge."""

    # A run's budget (services/runtime/engine/reply_rules.py): a loop that keeps calling the model ends
    # with a clear error, everything so far kept; the next message starts a new run with a fresh budget.
    run_max_model_calls: int = Field(200, ge=0, le=100_000, validation_alias="GAMMA_RUN_MAX_MODEL_CALLS",
        description="Model calls one run may make; reaching it ends the run with an `error` event (everything so "
                    "far kept; the next message starts a new run). 0: no bound.")
    run_max_tokens: int = Field(20_000_000, ge=0, le=10_000_000_000, validation_alias="GAMMA_RUN_MAX_TOKENS",
        description="Tokens one run may spend: input plus output as the API reported them, summed over its model "
                    "calls; reaching it ends the run like `GAMMA_RUN_MAX_MODEL_CALLS`. 0: no bound.")
    run_max_tokens_ceiling: int = Field(0, ge=0, le=10_000_000_000, validation_alias="GAMMA_RUN_MAX_TOKENS_CEILING",
        description="The most a session's own per-run token cap (`POST /sessions` `budget.run_max_tokens`) may be; 0: "
                    "an override may only lower `GAMMA_RUN_MAX_TOKENS` (docs/costs.md \"Budgets\").")
    # Spending caps (services/runtime/runs/spend.py, docs/costs.md "Budgets"): checked before each model call
    # with its projected cost; reaching one ends the run, and new prompts get a 402 until it is raised.
    session_max_usd: float = Field(0.0, ge=0, le=1_000_000, allow_inf_nan=False, validation_alias="GAMMA_SESSION_MAX_USD",
        description="US dollars one session may spend on model calls (agent, subagents, compaction), by the "
                    "catalogue's prices; reaching it ends the run and new prompts get a 402. 0: no cap.")
    session_max_usd_ceiling: float = Field(0.0, ge=0, le=1_000_000, allow_inf_nan=False,
        validation_alias="GAMMA_SESSION_MAX_USD_CEILING",
        description="The most a session's own cap (`POST /sessions` `budget.max_usd`) may be; 0: an override may "
                    "only lower `GAMMA_SESSION_MAX_USD` (any value when that is 0 too).")
    user_max_usd: float = Field(0.0, ge=0, le=1_000_000, allow_inf_nan=False, validation_alias="GAMMA_USER_MAX_USD",
        description="US dollars one user may spend over all their sessions (deleted ones too); reaching it ends "
                    "their runs and their new prompts get a 402. 0: no cap.")
    idle_s: float = Field(300.0, validation_alias="GAMMA_IDLE_S",
        description="Idle seconds before a live session goes dormant.")
    lease_ms: int = Field(10_000, validation_alias="GAMMA_LEASE_MS",
        description="Length of a session lease held by a runtime worker (ms).")
    # Wakes a runtime worker handles at once (services/runtime/app.py): a wake mostly waits (lease,
    # disk fence fsync, restore, SessionLive), ~30-100 ms, so one at a time queued a burst.
    runtime_wakes_at_once: int = Field(32, ge=1, le=256, validation_alias="GAMMA_RUNTIME_WAKES_AT_ONCE",
        description="Wakes a runtime worker handles at once, a sliding window (`services/runtime/app.py`, "
                    "`shared/streams/bus_window.py`): a wake mostly waits (lease, disk fence, restore), so one at a time "
                    "queued a burst.")
    runtime_wakes_per_read: int = Field(0, ge=0, le=256, validation_alias="GAMMA_RUNTIME_WAKES_PER_READ",
        description="Wakes a runtime worker reads at a time, as soon as that many of its window are free "
                    "(0: a quarter of `GAMMA_RUNTIME_WAKES_AT_ONCE`); few, so a burst spreads over the workers.")
    redis_warm_connections: int = Field(256, ge=0, le=512, validation_alias="GAMMA_RUNTIME_REDIS_WARM_CONNECTIONS",
        description="Redis connections a runtime worker opens at start (`shared/redis/reconnect.py` `warm`): turns that "
                    "start together each hold one for their awaited sends, and a pool that grew then opened them on "
                    "the event loop while other sessions streamed; 0: opened as needed.")
    dormant_retention_s: float = Field(300.0, ge=0.0, le=7 * 24 * 3600, validation_alias="GAMMA_DORMANT_RETENTION_S",
        description="How long a dormant session's events stream and drained inbox stay in Redis (the SSE replay "
                    "window; afterwards a resuming client gets an SSE `reset` and reloads GET /transcript).")
    dormant_sweep_interval_s: float = Field(10.0, gt=0, le=3600, validation_alias="GAMMA_DORMANT_SWEEP_INTERVAL_S",
        description="How often each runtime worker sweeps the dormant sessions whose retention ended (seconds).")
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
    # Turn starts paced against the tick above (services/runtime/runs/turn_starts.py): off by default, since
    # at 8 it took 16-38 ms off the streams' p99 during a burst of 200 starts but added 160-300 ms to
    # the time to first token's p90/p99 (bench/results/stream.md "Session 16 (pacing)").
    turn_starts_at_once: int = Field(0, ge=0, le=4096, validation_alias="GAMMA_RUNTIME_TURN_STARTS_AT_ONCE",
        description="Turns a runtime worker lets be in their start at once (from the run's start until its model "
                    "request is open); the others wait in order (`services/runtime/runs/turn_starts.py`), so that a burst "
                    "of turn starts does not make the streaming sessions' delta tick late; 0 = no limit (the default: the "
                    "streams' tail gains less than the later turns' first token loses).")
    turn_start_max_wait_ms: int = Field(1000, ge=0, le=60_000, validation_alias="GAMMA_RUNTIME_TURN_START_MAX_WAIT_MS",
        description="The longest a turn waits for `GAMMA_RUNTIME_TURN_STARTS_AT_ONCE` (ms); past it, it starts anyway.")
    causal_wait_ms: int = Field(2000, ge=0, le=60_000, validation_alias="GAMMA_CAUSAL_WAIT_MS",
        description="How long a prompt waits for the `artifact_update`s of the writes acknowledged before it (causal "
                    "order, docs/architecture.md); past it, it goes on after a dirty marker; `0` turns the wait off.")
    skills_dir: Path | None = Field(None, validation_alias="GAMMA_SKILLS_DIR",
        description="The skills the runtime loads and the sandbox mounts (`services/runtime/skillset/paths.py`); unset: the "
                    "repository's `skills/`.")
    knowledge_top_k: int = Field(5, ge=0, le=50, validation_alias="GAMMA_KNOWLEDGE_TOP_K",
        description="Knowledge hints at a prompt: at most this many notes.")
    knowledge_min_score: float = Field(0.1, ge=0, le=100, validation_alias="GAMMA_KNOWLEDGE_MIN_SCORE",
        description="Knowledge hints at a prompt: each note's BM25 score (name + scope against the prompt) at least "
                    "this.")
    knowledge_inline_chars: int = Field(16_000, ge=256, le=1_000_000, validation_alias="GAMMA_KNOWLEDGE_INLINE_CHARS",
        description="A note body longer than this is returned by `read_workspace_rule` as the workspace file "
                    "`knowledge/{id}.md`.")
    dynamic_tools: bool = Field(False, validation_alias="GAMMA_DYNAMIC_TOOLS",
        description="Tool namespaces with an active subset instead of the stable tool set (docs/skills.md \"Workspace "
                    "knowledge, skill rules, dynamic tools\").")

    @field_validator("skills_dir", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        return value or None
