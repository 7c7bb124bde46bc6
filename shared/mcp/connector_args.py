"""A connector call's arguments checked against its tool's schema at a bounded cost
(docs/architecture.md "Connectors", "Bounded work").

The model writes the arguments and a connector wrote the schema: either may be hostile, and the
check runs in the runtime worker every session on it shares. So:

- `over_budget` refuses arguments past a size, depth and value-count budget before anything else.
  On the loop only the size (`over_size`: one C-level encoding); the depth and count (`over_shape`, a
  walk of up to 10,000 values in Python: ~3 ms for a 4,500-object array, at every such call) run
  first in the worker, before the schema;
- `validate` runs in a worker process (shared/pools/offload.py) under a time budget, with jsonschema's two
  super-linear keywords replaced: `pattern` (and `patternProperties`, and the property matching of
  `additionalProperties`) by RE2, a linear-time engine (registration refuses a pattern RE2 cannot
  compile: shared/mcp/connector_schemas.py), and `uniqueItems` by a hash of each item's canonical form
  instead of jsonschema's pairwise comparison (quadratic for items it cannot sort, e.g. objects).
  What else could cost more (`unevaluatedProperties` beside `patternProperties`, a schema that applies
  many subschemas to each value) ends at the time budget: the worker is killed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import orjson

MAX_ARGS_BYTES = 256 * 1024  # serialized; a model's tool call arguments are far smaller
MAX_ARGS_DEPTH = 32
MAX_ARGS_VALUES = 10_000  # every value, container or scalar, counted once
VALIDATION_TIMEOUT_S = 5.0  # the worker is killed past it; 4,500 objects under uniqueItems take ~0.2 s


def over_budget(args: Any) -> str | None:
    """Why the arguments are past the budget, or None."""
    return over_size(args) or over_shape(args)


def over_size(args: Any) -> str | None:
    """Why the arguments are too large (or not JSON) to be sent anywhere, or None: cheap enough for
    the loop, and it bounds what the worker is handed."""
    try:
        size = len(orjson.dumps(args))
    except (TypeError, orjson.JSONEncodeError):
        return "the arguments are not JSON"
    if size > MAX_ARGS_BYTES:
        return f"the arguments are {size} bytes; the limit is {MAX_ARGS_BYTES}"
    return None


def over_shape(args: Any) -> str | None:
    """Why the arguments hold too many values or nest too deep, or None (a walk: in the worker)."""
    count = 0
    stack: list[tuple[Any, int]] = [(args, 1)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_ARGS_VALUES:
            return f"the arguments hold over {MAX_ARGS_VALUES} values; that is the limit"
        if depth > MAX_ARGS_DEPTH:
            return f"the arguments nest deeper than {MAX_ARGS_DEPTH} levels; that is the limit"
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return None


# ---------------------------------------------------------------- RE2

def re2_problem(pattern: str) -> str | None:
    """Why RE2 cannot compile the pattern, or None."""
    try:
        _compiled(pattern)
    except Exception as exc:  # noqa: BLE001 - re2.error, or a pattern too big for its memory budget
        return str(exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc)
    return None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    import re2

    options = re2.Options()
    options.log_errors = False
    options.max_mem = 8 << 20  # RE2's own bound on a compiled program
    return re2.compile(pattern, options)


# ---------------------------------------------------------------- uniqueItems in linear time

def _canonical(value: Any) -> Any:
    """A hashable form two JSON values share exactly when JSON Schema calls them equal: 1 and 1.0
    alike, true and 1 not (jsonschema's `equal`)."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", int(value) if isinstance(value, float) and value.is_integer() else value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("d", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("?", repr(value))


def unique(items: list[Any]) -> bool:
    seen: set[Any] = set()
    for item in items:
        key = _canonical(item)
        if key in seen:
            return False
        seen.add(key)
    return True


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _compiled(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for k, v in instance.items():
            if _compiled(pattern).search(k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's keyword, with the properties `patternProperties` covers matched by RE2."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    named, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in named and not any(_compiled(p).search(k) for p in patterns)]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        listed = ", ".join(repr(e) for e in sorted(extras)[:20])
        yield ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


def _unique_items(validator: Any, wanted: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if wanted and validator.is_type(instance, "array") and not unique(instance):
        yield ValidationError(f"{instance!r} has non-unique elements")


@functools.cache
def _validator_class() -> Any:
    """Draft 2020-12 with its super-linear keywords answered in linear time (no global patching:
    other users of jsonschema in the process keep its own)."""
    from jsonschema import Draft202012Validator, validators

    return validators.extend(Draft202012Validator, {
        "pattern": _pattern, "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties, "uniqueItems": _unique_items})


@functools.lru_cache(maxsize=64)
def _validator(schema_json: str) -> Any:
    return _validator_class()(json.loads(schema_json))


def warm() -> None:
    """Run as a validation worker starts (shared/pools/offload.py): the imports and the validator class."""
    _validator_class()
    _compiled("^warm$")


def _errors(schema_json: str, args: Any) -> Iterator[Any]:
    return iter(_validator(schema_json).iter_errors(args))


def validate(schema_json: str, args: Any) -> tuple[str, str] | None:
    """(place, message) of the first problem in path order, or None: the depth and count budget first,
    then the schema. Runs in a worker process (shared/pools/offload.py), after `over_size` on the loop;
    a schema jsonschema cannot evaluate (a reference loop) is a problem too."""
    too_big = over_shape(args)
    if too_big:
        return "(arguments)", too_big
    try:
        problems = sorted(_errors(schema_json, args), key=lambda e: [str(p) for p in e.path])
    except RecursionError:
        return "(schema)", "the tool's schema refers to itself without end"
    except Exception as exc:  # noqa: BLE001 - a schema the registry should have refused
        return "(schema)", f"the tool's schema cannot be evaluated: {type(exc).__name__}: {str(exc)[:200]}"
    if not problems:
        return None
    first = problems[0]
    message = first.message  # jsonschema's repeats the value: keep its head and the verdict at its end
    if len(message) > 300:
        message = f"fails `{first.validator}`: {message[:150]} ... {message[-120:]}"
    return "/".join(str(p) for p in first.path) or "(arguments)", message
