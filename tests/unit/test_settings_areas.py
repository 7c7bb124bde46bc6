"""The settings grouped per area (shared/settings/, README "Configuration"): each area reads its own
variables under their flat names (no `GAMMA_AREA__FIELD`), and a `Settings` override names the variable
(or the field), or gives a whole area."""

from __future__ import annotations

import pydantic
import pytest

from shared.settings import AREAS, RuntimeSettings, Settings, env_names, from_defaults


def test_every_variable_is_flat_and_names_one_field() -> None:
    names = [name for area in AREAS.values() for field in area.model_fields for name in env_names(field, area)]
    assert len(names) == len(set(names))
    assert all("__" not in name and name.isupper() for name in names)
    fields = [field for area in AREAS.values() for field in area.model_fields]
    assert len(fields) == len(set(fields)) and not set(fields) & set(AREAS)


def test_each_area_reads_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAMMA_IDLE_S", "7")
    monkeypatch.setenv("GAMMA_SANDBOX", "off")
    monkeypatch.setenv("GAMMA_RUNTIME__IDLE_S", "9")  # a nested name is no setting
    settings = Settings()
    assert (settings.runtime.idle_s, settings.commands.sandbox) == (7.0, "off")


def test_an_override_names_the_variable_the_field_or_the_area(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAMMA_IDLE_S", "7")
    monkeypatch.setenv("GAMMA_LEASE_MS", "2000")
    by_variable = Settings(GAMMA_IDLE_S=5, REDIS_URL="redis://x:1/0")
    assert (by_variable.runtime.idle_s, by_variable.runtime.lease_ms, by_variable.bus.redis_url) == (5.0, 2000,
                                                                                                      "redis://x:1/0")
    assert Settings(idle_s=6).runtime.idle_s == 6.0
    whole = Settings(runtime=RuntimeSettings(idle_s=4))
    assert (whole.runtime.idle_s, whole.runtime.lease_ms) == (4.0, 2000)


def test_an_unknown_or_doubled_override_fails() -> None:
    with pytest.raises(pydantic.ValidationError, match="GAMMA_IDLE is not a setting"):
        Settings(GAMMA_IDLE=5)
    with pytest.raises(pydantic.ValidationError, match="beside the whole runtime area"):
        Settings(runtime=RuntimeSettings(), GAMMA_IDLE_S=5)


def test_the_defaults_never_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAMMA_IDLE_S", "7")
    defaults = from_defaults(GAMMA_LEASE_MS=3000)
    assert (defaults.runtime.idle_s, defaults.runtime.lease_ms) == (300.0, 3000)
    assert isinstance(defaults.runtime, RuntimeSettings)
