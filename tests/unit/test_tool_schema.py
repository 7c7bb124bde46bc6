"""Tool parameters declared as types (shared/mcp/tool_schema.py): every tool of ours carries an argument model,
the schema it sends is that model's, and the model's arguments are checked against the same model with
clear errors. The schemas themselves are pinned byte for byte by tests/unit/test_prefix_golden.py."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import Field

from services.runtime.engine.loop import validate_arguments
from services.runtime.engine.types import Tool, ToolContext, ToolOutcome
from services.runtime.tools import Toolset
from services.runtime.tools.tool_policy import load_tools_tool
from shared.mcp.tool_schema import ToolArgs, argument_problem, parameters_of

ROOT = Path(__file__).resolve().parents[2]


class Item(ToolArgs):
    """A docstring that stays out of the schema."""
    title: str = Field(description="A property named like a schema keyword.")
    kind: Literal["a", "b"]
    note: str | None = Field(None, description="Null means left out.")


class Args(ToolArgs):
    path: str = Field(description="Where.")
    count: int = Field(None, description="How many.")
    flag: bool = Field(None, alias="someFlag")
    items: list[Item] = Field(None, max_length=3, description="Up to three.")
    extra: dict[str, Any] = Field(None, description="Free-form.")


def ours() -> list[Tool]:
    return [*Toolset(None).tools, load_tools_tool(None)]  # type: ignore[arg-type]


def test_every_tool_of_ours_sends_its_argument_models_schema() -> None:
    tools = ours()
    assert len(tools) >= 12
    for tool in tools:
        assert tool.arguments is not None and issubclass(tool.arguments, ToolArgs), tool.name
        assert tool.parameters is parameters_of(tool.arguments), tool.name


def test_the_schema_is_written_as_function_calling_reads_it() -> None:
    schema = parameters_of(Args)
    assert json.dumps(schema) == json.dumps({
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Where."},
            "count": {"type": "integer", "description": "How many."},
            "someFlag": {"type": "boolean"},
            "items": {"type": "array", "maxItems": 3, "description": "Up to three.", "items": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "description": "A property named like a schema keyword."},
                    "kind": {"type": "string", "enum": ["a", "b"]},
                    "note": {"type": "string", "description": "Null means left out."}},
                "required": ["title", "kind"],
                "additionalProperties": False}},
            "extra": {"type": "object", "description": "Free-form."}},
        "required": ["path"],
        "additionalProperties": False})


@pytest.mark.parametrize(("args", "problem"), [
    ({"path": "a"}, None),
    ({"path": "a", "count": 2, "someFlag": True, "items": [{"title": "t", "kind": "a", "note": None}],
      "extra": {"any": [1]}}, None),
    ({}, "Missing required argument path for t."),
    ({"path": "a", "nope": 1}, "Unknown argument 'nope' for t."),
    ({"path": "a", "someflag": True}, "Unknown argument 'someflag' for t."),
    ({"path": "a", "count": "5"}, "Invalid argument count for t: Input should be a valid integer."),
    ({"path": "a", "count": True}, "Invalid argument count for t: Input should be a valid integer."),
    ({"path": "a", "someFlag": 1}, "Invalid argument someFlag for t: Input should be a valid boolean."),
    ({"path": "a", "count": None}, "Invalid argument count for t: Input should be a valid integer."),
    ({"path": "a", "items": [{"title": "t"}]}, "Missing required argument items[0.kind] for t."),
    ({"path": "a", "items": [{"title": "t", "kind": "c"}]},
     "Invalid argument items[0.kind] for t: Input should be 'a' or 'b'."),
    ({"path": "a", "items": [{"title": "t", "kind": "a"}] * 4},
     "Invalid argument items for t: List should have at most 3 items after validation, not 4."),
])
def test_arguments_are_checked_against_the_model(args: dict[str, Any], problem: str | None) -> None:
    assert argument_problem("t", Args, args) == problem


async def _noop(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    return ToolOutcome(content="")


def test_the_loop_checks_ours_by_model_and_a_connectors_by_its_registered_schema() -> None:
    typed = Tool.typed("t", "d", Args, _noop)
    assert validate_arguments(typed, {"path": 1}) == "Invalid argument path for t: Input should be a valid string."
    assert validate_arguments(typed, {"__invalid_json__": "{"}) == "Invalid JSON arguments for t: {"
    connector = Tool("brand__colours", "d", {"type": "object", "properties": {"role": {"type": "string"}},
                                             "required": ["role"], "additionalProperties": False}, _noop)
    assert validate_arguments(connector, {}) == "Missing required argument(s) for brand__colours: role"
    assert validate_arguments(connector, {"role": "x"}) is None


def test_a_malformed_deviation_is_named_where_it_is() -> None:
    message_user = next(t for t in ours() if t.name == "message_user")
    problem = validate_arguments(message_user, {"message": "m", "blockOnUser": True, "deviations": [{"step": "s"}]})
    assert problem == "Missing required argument deviations[0.cause] for message_user."


def test_no_tool_schema_is_written_by_hand() -> None:
    """A dict literal with "type": "object" and "properties" in services/ or shared/ is a schema written by
    hand; tool parameters come from their models (the JSON Schema validator's own tests aside)."""
    found = []
    for top in ("services", "shared"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Dict):
                    keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                    if {"type", "properties"} <= keys:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []

