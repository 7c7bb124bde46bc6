"""The README's configuration tables are generated from the settings models (tools/settings_table.py,
`make docs`): a field added, renamed or described differently without regenerating fails here, and
every field carries a description."""

from __future__ import annotations

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings

from scripted.settings import ScriptedSettings
from shared.settings import Settings
from tools.settings_table import table, with_table

from .support import ROOT

TABLES = [("README.md", "settings", Settings), ("scripted/README.md", "scripted-settings", ScriptedSettings)]


@pytest.mark.parametrize(("path", "tag", "model"), TABLES)
def test_the_committed_table_is_the_generated_one(path: str, tag: str, model: type[BaseSettings]) -> None:
    text = (ROOT / path).read_text()
    assert with_table(text, tag, model) == text, f"{path}: run `make docs` (python -m tools.docs docs)"


@pytest.mark.parametrize("model", [Settings, ScriptedSettings])
def test_every_setting_is_described(model: type[BaseSettings]) -> None:
    assert [name for name, f in model.model_fields.items() if not (f.description or "").strip()] == []


def test_each_variable_is_listed_once() -> None:
    rows = [line.split(" | ")[0] for line in table(Settings).splitlines()[2:]]
    assert len(rows) == len(set(rows)) == len(Settings.model_fields)


class Redescribed(Settings):
    idle_s: float = Field(300.0, validation_alias="GAMMA_IDLE_S", description="Described differently.")


def test_a_changed_description_is_drift() -> None:
    text = (ROOT / "README.md").read_text()
    assert with_table(text, "settings", Redescribed) != text
