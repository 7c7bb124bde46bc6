"""`Idempotency-Key` on the POSTs that create or change something (docs/architecture.md "Session
lifecycle"; the IETF httpapi draft `draft-ietf-httpapi-idempotency-key-header`).

A route opts in with one line, `dependencies=[IDEMPOTENT]`. With the header, the dependency claims
the key for the caller in Redis before the handler runs; `IdempotencyRecorder` (an ASGI middleware)
stores the handler's response under it once the response is out. Then:

- the same key and the same request (method, path, canonical body: its sha256) within
  GAMMA_IDEMPOTENCY_TTL_S -> the stored response again (`Idempotent-Replayed: true`), nothing redone;
- the same key with another request -> 422; the key's first request still in flight -> 409.

Keys are per user (`gamma:idem:{user}` indexes them; `gamma:idem:{user}:{sha256(key)}` holds one),
at most GAMMA_IDEMPOTENCY_MAX_KEYS each (the oldest go first). A claim is an in-flight marker with a
lease (GAMMA_IDEMPOTENCY_LEASE_S): a proxy killed mid-request frees the key when it expires. Answers
that say "try again" (408, 409, 425, 429, 5xx) and responses over GAMMA_IDEMPOTENCY_MAX_RESPONSE_BYTES
are not stored: the key is released and a retry runs the request.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from fastapi import Depends, Header, Request
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.proxy.auth import current_user
from services.proxy.deps import Proxy, get_proxy
from services.proxy.edge.errors import ApiError
from shared.contracts.base import new_id, now_ms

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
STATE_KEY = "idempotency_claim"
MAX_KEY_CHARS = 255
NOT_STORED = {408, 409, 425, 429}
KEPT_HEADERS = ("content-type", "location")

# KEYS[1] the user's index, KEYS[2] the key's record. Drops index members past the TTL (their records
# expired with it), answers the record if there is one, else writes the in-flight marker and evicts
# the user's oldest keys beyond the cap.
_CLAIM = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
local rec = redis.call('GET', KEYS[2])
if rec then return rec end
redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[6])
local extra = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if extra > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[1], extra)
  for i = 1, #popped, 2 do redis.call('DEL', KEYS[1] .. ':' .. popped[i]) end
end
return false
"""
# Only the claim's holder (its token) turns the marker into the stored response or releases it.
_FINISH = """
local rec = redis.call('GET', KEYS[2])
if not rec or cjson.decode(rec)['token'] ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[1], ARGV[4])
else
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return 1
"""


class Record(BaseModel):
    """What a key holds: an in-flight marker (`token`) or the stored response."""

    state: str  # in_flight | done
    fp: str
    token: str = ""
    status: int = 0
    headers: list[tuple[str, str]] = []
    body: str = ""  # base64


def fingerprint(method: str, path: str, body: bytes) -> str:
    """sha256 of the method, the path and the canonical body: JSON with sorted keys and no spaces, so
    a client that re-serialises the same object retries the same request; other bodies as sent."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    except ValueError:
        canonical = body
    digest = hashlib.sha256()
    for part in (method.encode(), path.encode(), canonical):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def valid_key(key: str) -> bool:
    return 0 < len(key) <= MAX_KEY_CHARS and key.isascii() and key.isprintable()


@dataclass
class Claim:
    """A key this request holds; the recorder stores the response (or releases the key) through it."""

    redis: aioredis.Redis
    index: str
    member: str
    fp: str
    token: str
    ttl_ms: int
    max_bytes: int
    done: bool = field(default=False)

    @property
    def record_key(self) -> str:
        return f"{self.index}:{self.member}"

    async def finish(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        if self.done:
            return
        self.done = True
        if status in NOT_STORED or status >= 500 or len(body) > self.max_bytes:
            await self.release()
            return
        record = Record(state="done", fp=self.fp, token=self.token, status=status, headers=headers,
                        body=base64.b64encode(body).decode())
        await self.redis.eval(_FINISH, 2, self.index, self.record_key, self.token,  # type: ignore[misc]
                              record.model_dump_json(), self.ttl_ms, self.member)

    async def release(self) -> None:
        self.done = True
        await self.redis.eval(_FINISH, 2, self.index, self.record_key, self.token, "", 0, self.member)  # type: ignore[misc]


class Replay(Exception):
    """The stored response of the key's first request; `install_replay` answers it."""

    def __init__(self, record: Record) -> None:
        super().__init__("replayed")
        self.record = record


def replay_response(record: Record) -> Response:
    headers = {k: v for k, v in record.headers if k.lower() != "content-length"}
    headers[REPLAYED] = "true"
    return Response(base64.b64decode(record.body), status_code=record.status, headers=headers)


def index_key(user: str) -> str:
    return "gamma:idem:{" + user + "}"


async def idempotency(
    request: Request,
    key: str | None = Header(None, alias=HEADER, description="A unique key per intended request (a UUID): "
                             "a retry with the same key and body answers the first response, nothing redone"),
    user: str = Depends(current_user), proxy: Proxy = Depends(get_proxy),
) -> None:
    """The dependency a route opts in with (`IDEMPOTENT`). No header: nothing happens."""
    if key is None:
        return
    if not valid_key(key):
        raise ApiError(400, f"{HEADER} must be 1 to {MAX_KEY_CHARS} printable ASCII characters")
    settings = proxy.settings
    fp = fingerprint(request.method, request.url.path, await request.body())
    claim = Claim(redis=proxy.redis, index=index_key(user), member=hashlib.sha256(key.encode()).hexdigest(), fp=fp,
                  token=new_id("ik_"), ttl_ms=settings.sessions.idempotency_ttl_s * 1000,
                  max_bytes=settings.sessions.idempotency_max_response_bytes)
    marker = Record(state="in_flight", fp=fp, token=claim.token).model_dump_json()
    found: Any = await proxy.redis.eval(  # type: ignore[misc]
        _CLAIM, 2, claim.index, claim.record_key, now_ms(), claim.ttl_ms, settings.sessions.idempotency_lease_s * 1000,
        settings.sessions.idempotency_max_keys, marker, claim.member)
    if found:
        record = Record.model_validate_json(found)
        if record.fp != fp:
            raise ApiError(422, f"this {HEADER} was used with another request (method, path or body)")
        if record.state != "done":
            raise ApiError(409, f"a request with this {HEADER} is still in progress; retry later")
        raise Replay(record)
    request.state.idempotency_claim = claim


IDEMPOTENT = Depends(idempotency)
IDEMPOTENCY_RESPONSES: dict[int | str, dict[str, Any]] = {
    409: {"description": f"a request with the same {HEADER} is still in progress (or the route's own 409)"},
    422: {"description": f"the {HEADER} was used with another request (or the body is invalid)"},
}


class IdempotencyRecorder:
    """Stores the response of a request that claimed a key; releases the key if the request failed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PATCH", "PUT", "DELETE"):
            await self.app(scope, receive, send)
            return
        status, headers, chunks = 0, [], []

        async def capture(message: Message) -> None:
            nonlocal status, headers
            if _claim(scope) is not None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])
                               if k.decode("latin-1").lower() in KEPT_HEADERS]
                elif message["type"] == "http.response.body":
                    chunks.append(bytes(message.get("body", b"")))
            await send(message)

        try:
            await self.app(scope, receive, capture)
        except BaseException:
            claim = _claim(scope)
            if claim is not None and not claim.done:
                await claim.release()
            raise
        claim = _claim(scope)
        if claim is not None:
            await claim.finish(status, headers, b"".join(chunks))


def _claim(scope: Scope) -> Claim | None:
    found = scope.get("state", {}).get(STATE_KEY)
    return found if isinstance(found, Claim) else None
