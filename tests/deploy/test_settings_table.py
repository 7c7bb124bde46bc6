"""The configuration tables are generated from the settings models (tools/settings_table.py, `make docs`):
a field added, renamed or described differently without regenerating fails here, every field carries a
description, every area of shared/settings/ its own table under its docstring, and the tuning knobs
(shared/settings/tuning.py) stand in their own table, apart from the deployment settings."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings

from scripted.settings import ScriptedSettings
from shared.settings import AREAS, RuntimeSettings, Settings
from shared.settings.tuning import TUNING, is_deployment, is_tuning
from tests.deploy.support import ROOT
from tools.settings_table import Keep, everything, table, tables, with_table

TABLES: list[tuple[str, str, type[BaseModel], Keep]] = [
    ("docs/operations.md", "settings", Settings, is_deployment), ("docs/operations.md", "tuning", Settings, is_tuning),
    ("scripted/README.md", "scripted-settings", ScriptedSettings, everything)]
MODELS: list[type[BaseSettings]] = [*AREAS.values(), ScriptedSettings]


@pytest.mark.parametrize(("path", "tag", "model", "keep"), TABLES, ids=lambda v: v if isinstance(v, str) else "")
def test_the_committed_table_is_the_generated_one(path: str, tag: str, model: type[BaseModel], keep: Keep) -> None:
    text = (ROOT / path).read_text()
    assert with_table(text, tag, model, keep) == text, f"{path}: run `make docs` (python -m tools.docs docs)"


def test_every_tuning_knob_is_a_setting_listed_in_one_table_only() -> None:
    assert all(names <= set(AREAS[area].model_fields) for area, names in TUNING.items())
    deployment, tuning = tables(Settings, is_deployment), tables(Settings, is_tuning)
    rows = {line.split(" | ")[0].removeprefix("| ") for line in tuning.splitlines() if line.startswith("| `")}
    assert len(rows) == sum(len(names) for names in TUNING.values())
    assert "`GAMMA_GC_GEN0`" in rows and "`GAMMA_GC_GEN0`" not in deployment and "`GAMMA_IDLE_S`" not in tuning


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
    text = (ROOT / "docs/operations.md").read_text()
    assert "Described differently." in table(Redescribed)
    assert with_table(text, "settings", RedescribedSettings, is_deployment) != text
