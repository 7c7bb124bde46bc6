"""What a provider's function calling accepts of a connector's argument schema, checked at registration
(docs/architecture.md "Connectors"): one rejected schema in a request fails the whole request, so a
registered schema the API would refuse would stop every session that loaded the connector.

The runtime sends tools with `strict: false` (services/runtime/model/responses_api.py; Chat
Completions sends no `strict`), so the strict-mode subset (every property required,
`additionalProperties: false`, no `allOf`) does not apply. What the non-strict API refuses with
`invalid_function_parameters` and a valid draft 2020-12 schema may still hold:

- a top level other than `"type": "object"`, or with `oneOf`, `anyOf`, `allOf`, `enum` or `not`
  beside it ("schema must have type 'object' and not have ... at the top level");
- an array schema (`"type": "array"`, or a type list naming it) without `items` ("array schema
  missing items"), at any depth;
- a `$ref` the schema cannot resolve itself: a remote one, or a local pointer to nothing.

Each finding names its place as a 422 `loc` under the tool's `parameters`.

`unbounded` finds what would make checking a call unbounded or impossible (docs/architecture.md
"Bounded work"): a `pattern` (or `patternProperties` name) RE2, the linear-time engine the check uses
(shared/mcp/connector_args.py), cannot compile, and a reference loop that never descends into the
arguments (`$ref` to itself, or through `allOf`/`anyOf`/`oneOf`/`not`/`if`/`then`/`else`/
`dependentSchemas` back to itself): every call would recurse without end. A loop through
`properties` or `items` is a recursive structure, bounded by the arguments' depth, and is kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shared.mcp.connector_args import re2_problem

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


# Keywords whose subschemas apply to the same instance as their parent: a loop through them alone
# never reaches the end of the arguments.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")
_IN_PLACE_MAP = ("dependentSchemas",)


def _pointer(ref: str) -> tuple[str, ...] | None:
    if ref == "#":
        return ()
    if not ref.startswith("#/"):
        return None
    return tuple(raw.replace("~1", "/").replace("~0", "~") for raw in ref[2:].split("/"))


def _node(schema: Any, path: tuple[str, ...]) -> Any:
    node = schema
    for part in path:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _in_place(schema: dict[str, Any], path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Loc]]:
    """(next schema's path, the keyword's loc) for each subschema evaluated on the same instance."""
    sub = _node(schema, path)
    if not isinstance(sub, dict):
        return []
    out: list[tuple[tuple[str, ...], Loc]] = []
    ref = sub.get("$ref")
    target = _pointer(ref) if isinstance(ref, str) else None
    if target is not None and isinstance(ref, str) and _resolves(schema, ref):
        out.append((target, [*path, "$ref"]))
    for key in _IN_PLACE_ONE:
        if key in sub:
            out.append(((*path, key), [*path, key]))
    for key in _IN_PLACE_LIST:
        if isinstance(sub.get(key), list):
            out += [((*path, key, str(i)), [*path, key, i]) for i in range(len(sub[key]))]
    for key in _IN_PLACE_MAP:
        if isinstance(sub.get(key), dict):
            out += [((*path, key, name), [*path, key, name]) for name in sub[key]]
    return out


def _reference_loop(schema: dict[str, Any]) -> Loc | None:
    """The loc of a keyword that closes a loop of in-place references, or None (iterative DFS)."""
    state: dict[tuple[str, ...], int] = {}  # 1: on the current path, 2: done
    for _, loc in subschemas(schema, []):
        root = tuple(str(p) for p in loc)
        if state.get(root):
            continue
        stack = [(root, iter(_in_place(schema, root)))]
        state[root] = 1
        while stack:
            path, edges = stack[-1]
            step = next(edges, None)
            if step is None:
                state[path] = 2
                stack.pop()
                continue
            nxt, where = step
            if state.get(nxt) == 1:
                return where
            if not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(_in_place(schema, nxt))))
    return None


def unbounded(schema: dict[str, Any]) -> list[tuple[Loc, str]]:
    """(place, why) for each part that would make checking a call unbounded or impossible."""
    found: list[tuple[Loc, str]] = []
    for sub, loc in subschemas(schema, []):
        if not isinstance(sub, dict):
            continue
        if isinstance(sub.get("pattern"), str) and (why := re2_problem(sub["pattern"])):
            found.append(([*loc, "pattern"], f"the pattern must be RE2 syntax (no backreferences or lookaround): {why}"))
        for name in sub.get("patternProperties") or {}:
            if isinstance(name, str) and (why := re2_problem(name)):
                found.append(([*loc, "patternProperties", name], f"the pattern must be RE2 syntax: {why}"))
        if "$dynamicRef" in sub or "$recursiveRef" in sub:
            found.append((loc, "$dynamicRef is not accepted; use a local $ref"))
    loop = _reference_loop(schema)
    if loop is not None:
        found.append((loop, "this reference loops back to itself without descending into the arguments "
                            "(through $ref, allOf, anyOf, oneOf, not, if/then/else): every call would fail"))
    return found
