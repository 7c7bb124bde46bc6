"""A request body against the `openai` package's own param types (ResponseCreateParams /
CompletionCreateParams): unknown top-level keys, wrong types and values (e.g. an effort the SDK's enum
lacks). Compiled once; each request validates its top level and its last items only (TAIL): earlier items
were validated when they were new, since a conversation is sent again whole, growing at its end, and a
full walk of a long history per call costs more than the stream it opens (bench-stream)."""

from __future__ import annotations

from functools import cache
from typing import Any

from openai.types.chat.completion_create_params import CompletionCreateParamsBase
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from pydantic import TypeAdapter, ValidationError

from scripted.types import ScriptedError

TAIL = 8
PARAMS: dict[str, Any] = {"responses": ResponseCreateParamsBase, "chat": CompletionCreateParamsBase}
LIST_KEY = {"responses": "input", "chat": "messages"}


@cache
def _adapter(api: str) -> TypeAdapter[Any]:
    return TypeAdapter(PARAMS[api])


@cache
def _known(api: str) -> frozenset[str]:
    params = PARAMS[api]
    return frozenset(params.__required_keys__ | params.__optional_keys__) | {"stream"}


def _materialize(value: Any) -> Any:
    """`Iterable[...]` params validate lazily (a ValidatorIterator): consuming it validates the items."""
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    return [_materialize(v) for v in value]


def _where(loc: tuple[int | str, ...], list_key: str, offset: int) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part + offset if out == list_key else part}]"
        elif "[" in part or part[:1].isupper() or part in ("str", "list", "dict"):  # a union branch, not a field
            continue
        else:
            out += ("." if out else "") + part
    return out


def check(api: str, body: dict[str, Any]) -> ScriptedError | None:
    unknown = [k for k in body if k not in _known(api)]
    if unknown:  # reference §7.2: the API's wording for a key it does not know, per API
        if api == "chat":
            return ScriptedError(400, None, f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
        return ScriptedError(400, "unknown_parameter", f"Unknown parameter: '{unknown[0]}'.", param=unknown[0])
    key = LIST_KEY[api]
    items = body.get(key)
    offset = 0
    if isinstance(items, list) and len(items) > TAIL:
        offset = len(items) - TAIL
        body = {**body, key: items[offset:]}
    try:
        validated = _adapter(api).validate_python(body)
        for name, value in validated.items():
            try:
                _materialize(value)
            except ValidationError as exc:  # a lazy Iterable's errors are relative to it
                return _refusal(exc, (name,), key, offset)
    except ValidationError as exc:
        return _refusal(exc, (), key, offset)
    return None


def _refusal(exc: ValidationError, prefix: tuple[str, ...], key: str, offset: int) -> ScriptedError:
    worst = max(exc.errors(), key=lambda e: len(e["loc"]))
    where = _where((*prefix, *worst["loc"]), key, offset)
    return ScriptedError(400, "invalid_value", f"Invalid '{where}': {worst['msg']}.", param=where)
