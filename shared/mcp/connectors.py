"""Connector rules the notifications service and the runtime share (docs/architecture.md
"Connectors"): registration checks, the registry in Redis, the per-call record that settles each
call exactly once, and the provider-facing tool name.

The call record `gamma:{sid}:connector-call:{call_id}` is written before the call is sent; its
`outcome` field is set once (HSETNX) by whoever comes first: the notifications service with the
connector's answer, or the runtime when the call's deadline passes. A duplicate or late answer loses
that race and is dropped, so a call has exactly one outcome however often either side retries.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

import redis.asyncio as aioredis
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import ValidationError

from shared.contracts.records.connectors import (
    CONNECTOR_NAME,
    Connector,
    ConnectorCall,
    ConnectorSpec,
    McpEndpoint,
)
from shared.mcp.connector_schemas import incompatibilities, unbounded
from shared.redis import keys

MAX_SCHEMA_BYTES = 16 * 1024  # one tool's argument schema, serialized
CALL_TTL_S = 24 * 3600  # a call record outlives any deadline (MAX_TIMEOUT_S) and any accepted work's day
CALLS_MAXLEN = 10_000  # entries kept per call stream (approximate trim)
SEPARATOR = "__"  # `{connector}__{tool}`: the provider's function names allow no dot
TIMED_OUT = "timed_out"
UNKNOWN = "unknown"  # an MCP call sent by a holder that died before its answer: never sent again
STREAM, MCP = "stream", "mcp"  # how a call went out: our connector stream, or the runtime to an MCP server
_NAME = re.compile(CONNECTOR_NAME)

FieldError = dict[str, Any]  # {"loc": [...], "msg": str}: the shape of a pydantic error in a 422


def _err(loc: list[str | int], msg: str) -> FieldError:
    return {"loc": loc, "msg": msg}


def check_name(name: str) -> list[FieldError]:
    if not _NAME.fullmatch(name):
        return [_err(["path", "name"], f"must match {CONNECTOR_NAME}")]
    if SEPARATOR in name:
        return [_err(["path", "name"], f"must not contain {SEPARATOR!r} (it separates connector and tool)")]
    return []


def schema_errors(i: int, schema: dict[str, Any]) -> list[FieldError]:
    loc: list[str | int] = ["body", "tools", i, "parameters"]
    size = len(json.dumps(schema, separators=(",", ":")))
    if size > MAX_SCHEMA_BYTES:
        return [_err(loc, f"schema is {size} bytes; the limit is {MAX_SCHEMA_BYTES}")]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return [_err([*loc, *exc.path], f"not a valid JSON Schema (draft 2020-12): {exc.message[:300]}")]
    if schema.get("type") != "object":
        return [_err([*loc, "type"], 'the arguments are an object: "type" must be "object"')]
    # Valid JSON Schema, yet refused by the provider's function calling: it would fail every request.
    # Or one whose check would be unbounded or always fail (a pattern RE2 cannot run, a reference loop).
    return [_err([*loc, *where], why) for where, why in incompatibilities(schema) + unbounded(schema)]


def validate_spec(name: str, body: Any) -> tuple[ConnectorSpec | None, list[FieldError]]:
    """The spec, or the errors naming each bad field (a 422; nothing is stored)."""
    errors = check_name(name)
    try:
        spec = ConnectorSpec.model_validate(body)
    except ValidationError as exc:
        return None, errors + [_err(["body", *e["loc"]], e["msg"]) for e in exc.errors(include_url=False)]
    seen: set[str] = set()
    for i, tool in enumerate(spec.tools):
        if tool.name in seen:
            errors.append(_err(["body", "tools", i, "name"], f"duplicate tool name {tool.name!r}"))
        seen.add(tool.name)
        errors += schema_errors(i, tool.parameters)
    return (None if errors else spec), errors


# ---------------------------------------------------------------- the registry

_PUT = """
local exists = redis.call('HEXISTS', KEYS[1], ARGV[1])
if exists == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
local v = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ',"version":' .. v .. '}')
return v
"""


_SPEC_FIELDS = set(ConnectorSpec.model_fields)


class TooManyConnectors(Exception):
    pass


async def put_connector(client: aioredis.Redis, name: str, spec: ConnectorSpec, max_connectors: int,
                        mcp: McpEndpoint | None = None) -> Connector:
    """Store (or replace) a connector; its version is the registry's new change number. The same spec
    again (a connector restarting, an MCP server listed again with the same tools) changes nothing:
    its sessions keep their tools and hear nothing."""
    existing = await get_connector(client, name)
    if existing is not None and ConnectorSpec.model_validate(existing.model_dump(include=_SPEC_FIELDS)) == spec \
            and existing.mcp == mcp:
        return existing
    draft = Connector(name=name, version=1, updated_at=int(time.time() * 1000), mcp=mcp, **spec.model_dump())
    raw = draft.model_dump_json(exclude={"version"})[:-1]  # the script closes it with the version
    version = await client.eval(_PUT, 2, keys.CONNECTORS, keys.CONNECTORS_VERSION, name, raw,  # type: ignore[misc]
                                max_connectors)
    if not version:
        raise TooManyConnectors(f"at most {max_connectors} connectors may be registered")
    return draft.model_copy(update={"version": int(version)})


async def delete_connector(client: aioredis.Redis, name: str) -> bool:
    async with client.pipeline(transaction=True) as pipe:
        pipe.hdel(keys.CONNECTORS, name)
        pipe.incr(keys.CONNECTORS_VERSION)
        removed, _ = await pipe.execute()
    return bool(removed)


async def get_connector(client: aioredis.Redis, name: str) -> Connector | None:
    raw = await client.hget(keys.CONNECTORS, name)  # type: ignore[misc]
    return None if raw is None else Connector.model_validate_json(raw)


async def registry(client: aioredis.Redis) -> tuple[int, dict[str, Connector]]:
    """(change number, every connector) read together."""
    async with client.pipeline(transaction=True) as pipe:
        pipe.get(keys.CONNECTORS_VERSION)
        pipe.hgetall(keys.CONNECTORS)
        version, rows = await pipe.execute()
    return int(version or 0), {_text(k): Connector.model_validate_json(v) for k, v in rows.items()}


async def registry_version(client: aioredis.Redis) -> int:
    return int(await client.get(keys.CONNECTORS_VERSION) or 0)


def enabled_for(connector: Connector, workspace: str | None) -> bool:
    return connector.workspaces is None or (workspace is not None and workspace in connector.workspaces)


def tool_name(connector: str, tool: str) -> str:
    return f"{connector}{SEPARATOR}{tool}"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# ---------------------------------------------------------------- calls


# A record is created once per call: the same open again (a command re-sent after a reset) finds its
# own token and changes nothing; any other call with the id finds the record taken, so it can never
# read an outcome settled for an earlier call.
_OPEN = """
local held = redis.call('HGET', KEYS[1], 'token')
if held ~= ARGV[5] and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'connector', ARGV[1], 'tool', ARGV[2], 'deadline_ms', ARGV[3], 'turn', ARGV[4],
           'token', ARGV[5], 'kind', ARGV[7])
redis.call('EXPIRE', KEYS[1], ARGV[6])
return 1
"""


class CallIdTaken(Exception):
    """The call id already names another call of the session (a tool call id the model reused)."""


async def open_record(client: aioredis.Redis, call: ConnectorCall, turn: int = 0, kind: str = STREAM) -> None:
    """The call's record, before anything is sent. `turn` names the assistant message that made the
    call (its timestamp), so a wake tells this call's record from an earlier call's under the same id;
    `kind` says how it was sent (MCP: the runtime itself sent it, so an open record at a wake is a call
    whose outcome nobody knows). Raises CallIdTaken when the id is taken."""
    record = keys.connector_call(call.session_id, call.call_id)
    token = hashlib.sha256(f"{turn}\0{call.model_dump_json()}".encode()).hexdigest()[:32]
    opened = await client.eval(_OPEN, 1, record, call.connector, call.tool, call.deadline_ms,  # type: ignore[misc]
                               turn, token, CALL_TTL_S, kind)
    if not opened:
        raise CallIdTaken(f"call id {call.call_id} already names another call of session {call.session_id}")


async def open_call(client: aioredis.Redis, call: ConnectorCall, turn: int = 0) -> None:
    """The record first, then the stream entry: an answer always finds the record. Raises
    CallIdTaken, sending nothing, when the id is taken."""
    await open_record(client, call, turn)
    await client.xadd(keys.connector_calls(call.connector), {"type": call.type, "data": call.model_dump_json()},
                      maxlen=CALLS_MAXLEN, approximate=True)


async def read_call(client: aioredis.Redis, sid: str, call_id: str) -> dict[str, str]:
    raw = await client.hgetall(keys.connector_call(sid, call_id))  # type: ignore[misc]
    return {_text(k): _text(v) for k, v in raw.items()}


async def settle(client: aioredis.Redis, sid: str, call_id: str, outcome: str, field: str = "outcome") -> tuple[bool, str]:
    """Set the call's outcome unless one is set: (this one won, the outcome that holds)."""
    record = keys.connector_call(sid, call_id)
    if await client.hsetnx(record, field, outcome):  # type: ignore[misc]
        return True, outcome
    return False, _text(await client.hget(record, field))  # type: ignore[misc]
