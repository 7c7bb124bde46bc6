"""Connector arguments checked at a bounded cost (shared/mcp/connector_args.py): the size budget on the
loop, the depth and count budgets and the check in the worker, whose `uniqueItems` and `pattern` keep
JSON Schema's meaning in linear time."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.runtime.connector.connectors import checked
from shared.mcp import connector_args
from shared.mcp.connector_args import (
    MAX_ARGS_DEPTH,
    MAX_ARGS_VALUES,
    over_budget,
    over_shape,
    over_size,
    re2_problem,
    unique,
    validate,
)
from shared.mcp.connector_schemas import unbounded


def nest(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels - 1):
        value = [value]
    return value


def test_budgets() -> None:
    assert over_budget({"a": list(range(100))}) is None
    assert "values" in str(over_budget({"a": list(range(MAX_ARGS_VALUES))}))
    assert over_budget({"a": nest(MAX_ARGS_DEPTH - 1)}) is None
    assert "nest deeper" in str(over_budget({"a": nest(MAX_ARGS_DEPTH)}))
    assert "bytes" in str(over_budget({"a": "x" * 300_000}))
    assert over_size({"a": list(range(MAX_ARGS_VALUES))}) is None and over_shape({"a": "x" * 300_000}) is None
    wide = validate(json.dumps({"type": "object"}), {"a": list(range(MAX_ARGS_VALUES))})
    assert wide == ("(arguments)", f"the arguments hold over {MAX_ARGS_VALUES} values; that is the limit")


@pytest.mark.timeout(120)
async def test_the_loop_measures_the_arguments_and_the_worker_walks_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk of a call's values costs ~3 ms for a 4,500-object array: not on the loop every session
    of the worker shares (docs/architecture.md "Bounded work")."""
    def walked(args: Any) -> str | None:
        raise AssertionError("the arguments were walked on the loop")

    monkeypatch.setattr(connector_args, "over_shape", walked)  # in this process only, not in the worker
    monkeypatch.setattr(connector_args, "over_budget", walked)
    schema = json.dumps({"type": "object"})
    assert await checked(schema, {"a": list(range(MAX_ARGS_VALUES))}, "t1") == (
        "(arguments)", f"the arguments hold over {MAX_ARGS_VALUES} values; that is the limit")
    assert await checked(schema, {"a": "x" * 300_000}, "t1") == (
        "(arguments)", "the arguments are 300008 bytes; the limit is 262144")
    assert await checked(schema, {"a": [1, 2]}, "t1") is None


@pytest.mark.parametrize(("items", "expected"), [
    ([1, 1.0], False), ([True, 1], True), ([False, 0], True), ([{"a": 1}, {"a": 1.0}], False),
    ([{"a": [1, 2]}, {"a": [2, 1]}], True), ([[1, {"b": None}], [1, {"b": None}]], False), (["1", 1], True),
])
def test_unique_keeps_json_schema_equality(items: list[Any], expected: bool) -> None:
    from jsonschema._utils import uniq  # the reference (quadratic for unsortable items)

    assert unique(items) is expected is uniq(items)


def test_validate_in_linear_time_keeps_the_verdicts() -> None:
    schema = json.dumps({"type": "object", "properties": {
        "xs": {"type": "array", "uniqueItems": True}, "s": {"type": "string", "pattern": "^(a|aa)+$"},
        "m": {"type": "object", "patternProperties": {"^x(a|aa)+$": {"type": "integer"}}, "additionalProperties": False}}})
    assert validate(schema, {"xs": [{"a": i} for i in range(4000)], "s": "aaaa", "m": {"xaa": 1}}) is None
    where, why = validate(schema, {"xs": [{"a": i} for i in range(4000)] + [{"a": 0}]}) or ("", "")
    assert where == "xs" and "non-unique" in why and len(why) < 400
    assert validate(schema, {"s": "a" * 60 + "!"}) == ("s", f"'{'a' * 60}!' does not match '^(a|aa)+$'")
    assert validate(schema, {"m": {"x" + "a" * 60 + "!": 1}})[0] == "m"  # type: ignore[index]


def test_registration_refuses_what_re2_cannot_run_and_in_place_loops() -> None:
    assert re2_problem("^(a|aa)+$") is None and re2_problem("(a)\\1") and re2_problem("(?<=a)b")
    assert unbounded({"type": "object", "properties": {"c": {"type": "array", "items": {"$ref": "#"}}}}) == []
    found = unbounded({"type": "object", "properties": {"x": {"if": {"$ref": "#/properties/x"}}}})
    assert [loc for loc, _ in found] == [["properties", "x", "if", "$ref"]]
    found = unbounded({"type": "object", "patternProperties": {"(?=x)": {}}})
    assert found and found[0][0] == ["patternProperties", "(?=x)"]
