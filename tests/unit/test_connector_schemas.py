"""A connector's argument schema the provider's function calling would refuse is a 422 at registration,
naming the place (shared/mcp/connector_schemas.py, docs/architecture.md "Connectors"): valid draft 2020-12
is not enough, since one refused schema fails every request of every session that loaded it."""

from __future__ import annotations

from typing import Any

import pytest

from shared.mcp import connectors as rules
from shared.mcp.connector_schemas import incompatibilities

PARAMS = ["body", "tools", 0, "parameters"]


def locs(parameters: dict[str, Any]) -> list[list[Any]]:
    spec, errors = rules.validate_spec("c", {"description": "x", "tools": [
        {"name": "t", "description": "d", "parameters": parameters}]})
    assert (spec is None) == bool(errors)
    return [e["loc"] for e in errors]


@pytest.mark.parametrize(("parameters", "where"), [
    ({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}, ["anyOf"]),
    ({"type": "object", "oneOf": [{"required": ["a"]}]}, ["oneOf"]),
    ({"type": "object", "allOf": [{"required": ["a"]}]}, ["allOf"]),
    ({"type": "object", "not": {"required": ["a"]}}, ["not"]),
    ({"type": "object", "enum": [{}]}, ["enum"]),
    ({"type": "object", "properties": {"tags": {"type": "array"}}}, ["properties", "tags"]),
    ({"type": "object", "properties": {"v": {"type": ["string", "array"]}}}, ["properties", "v"]),
    ({"type": "object", "properties": {"rows": {"type": "array", "items": {"type": "array"}}}},
     ["properties", "rows", "items"]),
    ({"type": "object", "$defs": {"x": {"type": "array"}}}, ["$defs", "x"]),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, ["properties", "a", "$ref"]),
    ({"type": "object", "properties": {"a": {"$ref": "https://x.example/s.json"}}}, ["properties", "a", "$ref"]),
    ({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}, ["properties", "a", "$ref"]),
])
def test_a_schema_the_api_refuses_is_a_422_naming_its_place(parameters: dict[str, Any], where: list[Any]) -> None:
    assert [*PARAMS, *where] in locs(parameters), locs(parameters)


@pytest.mark.parametrize("parameters", [
    {"type": "object"},
    {"type": "object", "properties": {}},
    {"type": "object", "properties": {"items": {"type": "string"}, "not": {"type": "integer"}}},  # property names
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}},
    {"type": "object", "$defs": {"colour": {"type": "string", "pattern": "^#[0-9A-F]{6}$"}},
     "properties": {"c": {"$ref": "#/$defs/colour"}, "d": {"anyOf": [{"type": "string"}, {"type": "null"}]}}},
    {"type": "object", "properties": {"self": {"$ref": "#"}}},
])
def test_a_schema_the_api_accepts_passes(parameters: dict[str, Any]) -> None:
    assert locs(parameters) == [] and incompatibilities(parameters) == []
