"""Session rows `gamma:{sid}:session` (the proxy writes their fields below) and the per-user listing.

Fields (docs/integration.md): id, owner, variant, model (ModelConfig JSON), status (dormant | waking |
deleting: services/proxy/dormant/erase.py), wake_id, title, created_at, updated_at (ms). Beside them, written by others: the runtime's `fence`
(shared/redis/fence.py) and the dormancy sweep's `usage` and `events_swept` (shared/redis/dormancy.py). The proxy
also keeps `waking_since` and `wake_fence` (the fence value when it sent the Wake), so a finished wake
is recognised without a write: once the fence moved past `wake_fence` a runtime took the lease.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import redis.asyncio as aioredis
from pydantic import BaseModel

from shared.contracts.base import new_id, now_ms
from shared.contracts.http import ModelConfig, SessionView, Status, Variant
from shared.redis import keys
from shared.redis.fence import fence_of
from shared.redis.redis_wire import text

WAKE_WINDOW_MS = 60_000
RowStatus = Literal["dormant", "waking", "deleting"]


class SessionRow(BaseModel):
    id: str
    owner: str
    variant: Variant = "base"
    model: ModelConfig = ModelConfig()
    status: RowStatus = "dormant"
    wake_id: str | None = None
    waking_since: int | None = None
    wake_fence: int | None = None
    title: str | None = None
    created_at: int
    updated_at: int

    def to_hash(self) -> dict[str, str]:
        out: dict[str, str] = {
            "id": self.id,
            "owner": self.owner,
            "variant": self.variant,
            # Without the nulls: a value over 64 bytes (hash-max-listpack-value) turns the whole row
            # into a hashtable, ~1 KB instead of ~300 B kept for every dormant session (docs/integration.md "Dormant sessions in Redis").
            "model": self.model.model_dump_json(exclude_none=True),
            "status": self.status,
            "created_at": str(self.created_at),
            "updated_at": str(self.updated_at),
        }
        if self.wake_id is not None:
            out["wake_id"] = self.wake_id
        if self.waking_since is not None:
            out["waking_since"] = str(self.waking_since)
        if self.wake_fence is not None:
            out["wake_fence"] = str(self.wake_fence)
        if self.title is not None:
            out["title"] = self.title
        return out

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any], sid: str) -> SessionRow:
        """`sid` is the id in the row's key: the dormancy sweep drops the `id` field, which repeats it."""
        data = {"id": sid, **{text(k): text(v) for k, v in raw.items()}}
        model = ModelConfig.model_validate_json(data.pop("model", "{}") or "{}")
        return cls.model_validate({**data, "model": model})



@dataclass(frozen=True)
class SessionState:
    """A row plus the liveness keys, read in one round trip."""

    row: SessionRow
    leased: bool
    running: bool
    fence: int
    run_id: str | None = None  # the value of the `running` key: the active run's id

    def status(self, now: int | None = None) -> Status:
        if self.leased:
            return "live"
        now = now_ms() if now is None else now
        if (
            self.row.status == "waking"
            and self.row.waking_since is not None
            and now - self.row.waking_since < WAKE_WINDOW_MS
            and (self.row.wake_fence is None or self.fence <= self.row.wake_fence)
        ):
            return "waking"
        return "dormant"

    @property
    def active_run_id(self) -> str | None:
        return self.run_id if self.running and self.leased else None

    def view(self) -> SessionView:
        r = self.row
        return SessionView(
            id=r.id, owner=r.owner, variant=r.variant, model=r.model, status=self.status(),
            running=self.running and self.leased, created_at=r.created_at, updated_at=r.updated_at,
            run_id=self.active_run_id, title=r.title,
        )


def new_session_id() -> str:
    return new_id("s_")


class SessionQuotaExceeded(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"session quota reached: a user may own at most {limit} sessions (GAMMA_MAX_SESSIONS_PER_USER)")
        self.limit = limit


# Reserve the listing slot only while the user is under the quota: one atomic step, so concurrent
# creations cannot overshoot it (a check-then-add would let a burst through).
_RESERVE = """
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
return 1
"""


async def create_row(redis: aioredis.Redis, owner: str, variant: Variant, model: ModelConfig,
                     max_sessions: int | None = None, budget: Mapping[str, str] | None = None) -> SessionRow:
    """Raises SessionQuotaExceeded when `owner` already has `max_sessions` sessions. `budget`: the
    session's own caps (services/proxy/budgets.py), written with the row (one slot, one MULTI)."""
    now = now_ms()
    row = SessionRow(id=new_session_id(), owner=owner, variant=variant, model=model, created_at=now, updated_at=now)
    if max_sessions is None:
        await redis.zadd(keys.user_sessions(owner), {row.id: now})
    elif not await redis.eval(_RESERVE, 1, keys.user_sessions(owner), max_sessions, now, row.id):  # type: ignore[misc]
        raise SessionQuotaExceeded(max_sessions)
    # The listing skips ids without a row, so a crash between the two writes leaves nothing visible.
    async with redis.pipeline(transaction=True) as pipe:
        if budget:
            pipe.hset(keys.spend(row.id), mapping=dict(budget))  # type: ignore[arg-type]
        pipe.hset(keys.session_row(row.id), mapping=row.to_hash())  # type: ignore[arg-type]
        await pipe.execute()
    return row


async def load_state(redis: aioredis.Redis, sid: str) -> SessionState | None:
    """Row and liveness keys in one round trip (two commands: this runs on every request)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.session_row(sid))
        # MGET by name: a cluster pipeline refuses `.mget` (any MGET) though these keys share a slot.
        pipe.execute_command("MGET", keys.lease(sid), keys.running(sid), keys.legacy_fence(sid))
        raw, (lease, running, legacy) = await pipe.execute()
    return _state(sid, raw, lease, running, legacy)


def _state(sid: str, raw: Mapping[Any, Any], lease: object, running: object, legacy: object) -> SessionState | None:
    """None for no row, or only a fence field (a lease taken for an id the proxy never created)."""
    data = {text(k): v for k, v in raw.items()}
    if "owner" not in data:
        return None
    return SessionState(
        row=SessionRow.from_hash(raw, sid), leased=lease is not None, running=running is not None,
        fence=fence_of(data.get(keys.FENCE_FIELD), legacy),
        run_id=text(running) or None if running is not None else None,
    )


class BadCursor(ValueError):
    pass


def encode_cursor(score: float, sid: str) -> str:
    return base64.urlsafe_b64encode(f"{int(score)}:{sid}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        score, _, sid = raw.partition(":")
        if not sid:
            raise ValueError("no session id")
        return int(score), sid
    except ValueError as exc:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise BadCursor(f"invalid cursor {cursor[:80]!r}") from exc


async def list_page(redis: aioredis.Redis, owner: str, limit: int,
                    cursor: str | None) -> tuple[list[SessionState], str | None]:
    """One page, newest first, after `cursor` (the last item of the previous page), and the next cursor.

    The cursor names the last session shown, so sessions created meanwhile (at the front) shift
    nothing: the next page starts right after that session's current rank."""
    key = keys.user_sessions(owner)
    start = 0
    if cursor is not None:
        score, sid = decode_cursor(cursor)
        rank: Any = await redis.zrevrank(key, sid)
        # A session that left the listing: continue below its creation time.
        start = int(await redis.zcount(key, score, "+inf")) if rank is None else int(rank) + 1
    page: list[Any] = await redis.zrevrange(key, start, start + limit - 1, withscores=True)
    async with redis.pipeline(transaction=False) as pipe:  # one round trip for the whole page
        for member, _ in page:
            pipe.hgetall(keys.session_row(text(member)))
            pipe.execute_command("MGET", keys.lease(text(member)), keys.running(text(member)),
                                 keys.legacy_fence(text(member)))
        replies: list[Any] = await pipe.execute()
    out: list[SessionState] = []
    for i in range(len(page)):
        raw, (lease, running, legacy) = replies[2 * i], replies[2 * i + 1]
        state = _state(text(page[i][0]), raw, lease, running, legacy)
        if state is not None and state.row.owner == owner:
            out.append(state)
    more = len(page) == limit and await redis.zcard(key) > start + limit
    next_cursor = encode_cursor(page[-1][1], text(page[-1][0])) if more else None
    return out, next_cursor


async def drop_row(redis: aioredis.Redis, owner: str, sid: str) -> None:
    """Undo `create_row` for a session whose disk could not be laid out (a fork that failed)."""
    await redis.delete(keys.session_row(sid))
    await redis.zrem(keys.user_sessions(owner), sid)


async def mark_waking(redis: aioredis.Redis, sid: str, wake_id: str, fence: int) -> bool:
    """False (nothing written) when the row is gone or being deleted meanwhile."""
    now = str(now_ms())
    fields = ["status", "waking", "wake_id", wake_id, "waking_since", now, "wake_fence", str(fence), "updated_at", now]
    return bool(await redis.eval(_MARK_WAKING, 1, keys.session_row(sid), keys.STATUS_DELETING, *fields))  # type: ignore[misc]


_MARK_WAKING = """
if redis.call('HEXISTS', KEYS[1], 'owner') == 0 or redis.call('HGET', KEYS[1], 'status') == ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return 1
"""


async def mark_dormant(redis: aioredis.Redis, sid: str) -> None:
    now = now_ms()
    await redis.hset(keys.session_row(sid), mapping={"status": "dormant", "updated_at": str(now)})


async def set_title(redis: aioredis.Redis, sid: str, title: str | None) -> None:
    """Only while the row exists and is not being deleted: a PATCH racing a DELETE recreates nothing."""
    await redis.eval(_SET_TITLE, 1, keys.session_row(sid), title or "", str(now_ms()), keys.STATUS_DELETING)  # type: ignore[misc]


_SET_TITLE = """
if redis.call('HEXISTS', KEYS[1], 'owner') == 0 or redis.call('HGET', KEYS[1], 'status') == ARGV[3] then return 0 end
if ARGV[1] == '' then redis.call('HDEL', KEYS[1], 'title') else redis.call('HSET', KEYS[1], 'title', ARGV[1]) end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[2])
return 1
"""


async def set_model(redis: aioredis.Redis, sid: str, model: ModelConfig) -> bool:
    """The session's model (PATCH), read by its next wake and by nothing else; False when the row is
    gone or being deleted."""
    done = await redis.eval(_SET_MODEL, 1, keys.session_row(sid), model.model_dump_json(exclude_none=True),  # type: ignore[misc]
                            str(now_ms()), keys.STATUS_DELETING)
    return bool(done)


_SET_MODEL = """
if redis.call('HEXISTS', KEYS[1], 'owner') == 0 or redis.call('HGET', KEYS[1], 'status') == ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], 'model', ARGV[1], 'updated_at', ARGV[2])
return 1
"""


async def touch(redis: aioredis.Redis, sid: str) -> None:
    await redis.hset(keys.session_row(sid), "updated_at", str(now_ms()))
