"""Tool parameters declared as types (docs/architecture.md "The runtime's parts"): a tool's arguments are a
pydantic model, and both the JSON schema sent to the model and the check of the model's arguments derive
from it. The schema is pydantic's, written the way function calling reads it (and as the static prefix
pins it, tests/unit/test_prefix_golden.py): nested models inlined, no titles, no defaults, an optional
argument simply not required, the keys in one fixed order. The check is pydantic's strict validation
(no coercion: "5" is not an integer, 1 is not a boolean; unknown arguments refused), its first error
written for the model: which argument, what is wrong."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Keys in this order first (the order the schemas were always sent in), any other after them.
ORDER = ("type", "minimum", "maximum", "minItems", "maxItems", "minLength", "maxLength", "enum", "description",
         "items", "properties", "required", "additionalProperties")


class ToolArgs(BaseModel):
    """The arguments of one tool: validated, never read back (a tool's execute takes the arguments as the
    model sent them). An optional argument is declared `optional(...)` on its plain type when it may be
    left out but not sent as null, or as `T | None = Field(None)` when null means left out; the schema
    shows `T` for both."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_by_alias=True, validate_by_name=False)


def optional(description: str | None = None, **constraints: Any) -> Any:
    """An argument that may be left out (absent, never null): its field, default None, never validated."""
    return Field(None, description=description, **constraints)


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """One schema node as sent: references inlined, pydantic's titles and defaults left out, keys ordered."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _inline(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    options = node.get("anyOf", [])
    if len(options) == 2 and {"type": "null"} in options:  # `T | None`: null is accepted as left out
        plain = next(o for o in options if o != {"type": "null"})
        return _inline({**plain, **{k: v for k, v in node.items() if k != "anyOf"}}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "default", "$defs"):
            continue
        if key == "properties":  # argument names, each with its schema
            out[key] = {name: _inline(schema, defs) for name, schema in value.items()}
        else:
            out[key] = [_inline(v, defs) for v in value] if key in ("anyOf", "oneOf", "allOf", "prefixItems") \
                else _inline(value, defs)
    if "properties" in out:
        out.pop("description", None)  # a model's docstring is for the code, not the model
    if out.get("type") == "object" and out.get("additionalProperties") is True:
        del out["additionalProperties"]  # a free-form object: "type": "object" says it
    return {k: out[k] for k in (*[k for k in ORDER if k in out], *[k for k in out if k not in ORDER])}


@functools.cache
def parameters_of(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of `model`'s arguments as the model is sent it: built once per model, and the same
    dict for every session (read-only: requests serialize it, nothing writes to it)."""
    schema = model.model_json_schema(by_alias=True)
    return _inline(schema, schema.get("$defs", {}))  # type: ignore[no-any-return]


def _where(loc: tuple[int | str, ...]) -> str:
    """`deviations[0.cause]` for a nested error, `path` for a top-level one."""
    head, *rest = [str(p) for p in loc] or ["arguments"]
    return f"{head}[{'.'.join(rest)}]" if rest else head


def argument_problem(tool: str, model: type[BaseModel], args: dict[str, Any]) -> str | None:
    """None when `args` are valid; otherwise one clear sentence for the model (the first error)."""
    try:
        model.model_validate(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        kind, where = first["type"], _where(tuple(first["loc"]))
        if kind == "missing":
            return f"Missing required argument {where} for {tool}."
        if kind == "extra_forbidden":
            return f"Unknown argument {where!r} for {tool}."
        return f"Invalid argument {where} for {tool}: {first['msg']}."
    return None
