"""What a provider's function calling accepts of a connector's argument schema, checked at registration
(docs/architecture.md "Connectors"): one rejected schema in a request fails the whole request, so a
registered schema the API would refuse would stop every session that loaded the connector.

The runtime sends tools with `strict: false` (services/runtime/engine/responses_api.py; Chat
Completions sends no `strict`), so the strict-mode subset (every property required,
`additionalProperties: false`, no `allOf`) does not apply. What the non-strict API refuses with
`invalid_function_parameters` and a valid draft 2020-12 schema may still hold:

- a top level other than `"type": "object"`, or with `oneOf`, `anyOf`, `allOf`, `enum` or `not`
  beside it ("schema must have type 'object' and not have ... at the top level");
- an array schema (`"type": "array"`, or a type list naming it) without `items` ("array schema
  missing items"), at any depth;
- a `$ref` the schema cannot resolve itself: a remote one, or a local pointer to nothing.

Each finding names its place as a 422 `loc` under the tool's `parameters`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Loc = list[str | int]

TOP_LEVEL_REFUSED = ("oneOf", "anyOf", "allOf", "enum", "not")
# Keywords whose value is one subschema, a map of them, or a list of them (draft 2020-12 applicators).
_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
        "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LIST = ("prefixItems", "allOf", "anyOf", "oneOf")


def subschemas(schema: Any, loc: Loc) -> Iterator[tuple[Any, Loc]]:
    """Every schema in `schema`, itself first, with its place (keywords only: a property named
    `items` is a property, not the keyword)."""
    yield schema, loc
    if not isinstance(schema, dict):
        return
    for key in _ONE:
        if key in schema:
            yield from subschemas(schema[key], [*loc, key])
    for key in _MAP:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                yield from subschemas(sub, [*loc, key, name])
    for key in _LIST:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                yield from subschemas(sub, [*loc, key, i])


def _resolves(schema: dict[str, Any], ref: str) -> bool:
    """A local `#` / `#/a/b` JSON pointer that names a part of `schema`."""
    if ref == "#":
        return True
    if not ref.startswith("#/"):
        return False
    node: Any = schema
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _is_array(sub: dict[str, Any]) -> bool:
    t = sub.get("type")
    return t == "array" or (isinstance(t, list) and "array" in t)


def incompatibilities(schema: dict[str, Any]) -> list[tuple[Loc, str]]:
    """(place, why) for each part of a valid draft 2020-12 object schema the provider would refuse."""
    found: list[tuple[Loc, str]] = []
    for key in TOP_LEVEL_REFUSED:
        if key in schema:
            found.append(([key], f"{key!r} is not accepted at the top level of a function's parameters "
                                 "(the API requires a plain \"type\": \"object\" there)"))
    for sub, loc in subschemas(schema, []):
        if not isinstance(sub, dict):
            continue
        if _is_array(sub) and "items" not in sub:
            found.append((loc, 'an array schema needs "items" (the API refuses "array schema missing items")'))
        ref = sub.get("$ref")
        if ref is not None and (not isinstance(ref, str) or not _resolves(schema, ref)):
            found.append(([*loc, "$ref"], "only a local $ref ('#/...') that points into this schema is allowed"))
    return found
