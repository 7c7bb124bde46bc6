"""The TypeScript client's types (clients/typescript/src/schema.d.ts) are what openapi-typescript makes of
the committed docs/openapi.json (itself checked current by test_docs.py): `make docs` after an API change."""

from __future__ import annotations

from pathlib import Path

from tests.support.needs import needs
from tools import client_types

NEEDS_NODE = needs(None if client_types.available() else "node or openapi-typescript missing (make node)")


@NEEDS_NODE
def test_committed_client_types_are_current(tmp_path: Path) -> None:
    fresh = tmp_path / "schema.d.ts"
    client_types.generate(client_types.ROOT / "docs" / "openapi.json", fresh)
    assert fresh.read_text() == client_types.TYPES.read_text(), "clients/typescript types drifted: run `make docs`"


@NEEDS_NODE
def test_drift_is_detected(tmp_path: Path) -> None:
    """Guards against a vacuous comparison: a changed document gives different types."""
    changed = tmp_path / "openapi.json"
    changed.write_text((client_types.ROOT / "docs" / "openapi.json").read_text().replace(
        '"title": "Expected Run Id"', '"title": "Expected Run"', 1).replace('"expected_run_id"', '"expected_run"', 1))
    fresh = tmp_path / "schema.d.ts"
    client_types.generate(changed, fresh)
    assert fresh.read_text() != client_types.TYPES.read_text()
