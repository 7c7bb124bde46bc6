"""Every contract model matches its checked-in JSON Schema in tests/contract/schemas/ (drift is loud),
and every checked-in schema still has a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.contracts.schemas import CONTRACTS, schema_of

SCHEMAS = Path(__file__).parent / "schemas"
HINT = "the contract changed: if on purpose, run `make schemas` and commit tests/contract/schemas/"


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_model_matches_checked_in_schema(name: str) -> None:
    path = SCHEMAS / f"{name}.json"
    assert path.exists(), f"no checked-in schema {path.name}; {HINT}"
    checked_in = json.loads(path.read_text())
    current = json.loads(json.dumps(schema_of(CONTRACTS[name]), sort_keys=True))
    assert current == checked_in, f"{name} drifted from {path.name}; {HINT}"


def test_every_checked_in_schema_has_a_model() -> None:
    orphans = sorted(p.stem for p in SCHEMAS.glob("*.json") if p.stem not in CONTRACTS)
    assert not orphans, f"schemas without a model in shared/contracts/schemas.CONTRACTS: {orphans}; " \
                        "delete them or add the model, then run `make schemas`"


def test_schema_files_are_written_the_way_make_schemas_writes_them(tmp_path: Path) -> None:
    from shared.contracts.schemas import write

    written = {p.name: p.read_text() for p in write(tmp_path)}
    stale = sorted(name for name, text in written.items()
                   if not (SCHEMAS / name).exists() or (SCHEMAS / name).read_text() != text)
    assert not stale, f"{stale}: {HINT}"
