"""The README's configuration tables are generated from the settings models (tools/settings_table.py,
`make docs`): a field added, renamed or described differently without regenerating fails here, every
field carries a description, and every area of shared/settings/ its own table under its docstring."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings

from scripted.settings import ScriptedSettings
from shared.settings import AREAS, RuntimeSettings, Settings
from tools.settings_table import table, tables, with_table

from .support import ROOT

TABLES = [("README.md", "settings", Settings), ("scripted/README.md", "scripted-settings", ScriptedSettings)]
MODELS: list[type[BaseSettings]] = [*AREAS.values(), ScriptedSettings]


@pytest.mark.parametrize(("path", "tag", "model"), TABLES)
def test_the_committed_table_is_the_generated_one(path: str, tag: str, model: type[BaseModel]) -> None:
    text = (ROOT / path).read_text()
    assert with_table(text, tag, model) == text, f"{path}: run `make docs` (python -m tools.docs docs)"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_setting_is_described(model: type[BaseSettings]) -> None:
    assert [name for name, f in model.model_fields.items() if not (f.description or "").strip()] == []


@pytest.mark.parametrize("area", AREAS.values(), ids=lambda m: m.__name__)
def test_every_area_says_what_it_configures(area: type[BaseSettings]) -> None:
    assert len((area.__doc__ or "").strip().splitlines()) == 1


def test_one_table_per_area_each_variable_listed_once() -> None:
    text = tables(Settings)
    assert [line for line in text.splitlines() if line.startswith("**`settings.")] == [
        f"**`settings.{name}`**: {(area.__doc__ or '').strip()}" for name, area in AREAS.items()]
    rows = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == len(set(rows)) == sum(len(area.model_fields) for area in AREAS.values())


class Redescribed(RuntimeSettings):
    idle_s: float = Field(300.0, validation_alias="GAMMA_IDLE_S", description="Described differently.")


class RedescribedSettings(Settings):
    runtime: Redescribed = Field(default_factory=Redescribed)


def test_a_changed_description_is_drift() -> None:
    text = (ROOT / "README.md").read_text()
    assert "Described differently." in table(Redescribed)
    assert with_table(text, "settings", RedescribedSettings) != text
