"""Configuration from the environment, grouped per area (README "Configuration" lists every variable).

Each area (a module here) reads its own variables under their flat names (shared/settings/area.py), and
`Settings` holds one of each: `settings.runtime.idle_s` is `GAMMA_IDLE_S`. The environment is read here
only (ruff TID251 bans it elsewhere). Overrides name the variable, as the environment would set it
(`Settings(GAMMA_IDLE_S=5)`, or the field's name, `idle_s=5`), or give a whole area
(`Settings(runtime=RuntimeSettings(idle_s=5))`); an unknown name fails.
"""

from __future__ import annotations

import functools
import os
from typing import Annotated, Any, cast

from pydantic import BaseModel, Field, TypeAdapter, model_validator

from shared.settings.area import Area, defaults_only
from shared.settings.auth import LOCAL_TOKEN, LOCAL_USER, AuthSettings
from shared.settings.bus import BusSettings
from shared.settings.commands import CommandSettings
from shared.settings.compaction import CompactionSettings
from shared.settings.images import ImageSettings
from shared.settings.limits import LimitSettings
from shared.settings.models import ModelServerSettings
from shared.settings.notifications import NotificationSettings
from shared.settings.runtime import RuntimeSettings
from shared.settings.server import ServerSettings
from shared.settings.sessions import SessionSettings
from shared.settings.storage import StorageSettings

__all__ = ["AREAS", "LOCAL_TOKEN", "LOCAL_USER", "Area", "area_types", "AuthSettings", "BusSettings", "CommandSettings",
           "CompactionSettings", "ImageSettings", "LimitSettings", "ModelServerSettings", "NotificationSettings",
           "RuntimeSettings", "ServerSettings", "SessionSettings", "Settings", "StorageSettings", "from_defaults",
           "env_names", "env_setting", "load_settings"]


class Settings(BaseModel):
    """Every setting, one model per area (README "Configuration")."""

    bus: BusSettings = Field(default_factory=BusSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    commands: CommandSettings = Field(default_factory=CommandSettings)
    models: ModelServerSettings = Field(default_factory=ModelServerSettings)
    compaction: CompactionSettings = Field(default_factory=CompactionSettings)
    images: ImageSettings = Field(default_factory=ImageSettings)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    notifications: NotificationSettings = Field(default_factory=NotificationSettings)

    @model_validator(mode="before")
    @classmethod
    def _per_area(cls, data: Any) -> Any:
        return areas_of(data, area_types(cls)) if isinstance(data, dict) else data


def area_types(model: type[Settings]) -> dict[str, type[Area]]:
    """A settings model's areas: field name -> area model."""
    return {name: cast(type[Area], field.annotation) for name, field in model.model_fields.items()}


AREAS = area_types(Settings)


def env_names(field_name: str, area: type[Area]) -> tuple[str, ...]:
    """The environment variables one field reads, first to last."""
    alias = area.model_fields[field_name].validation_alias
    return (alias,) if isinstance(alias, str) else tuple(str(c) for c in getattr(alias, "choices", ()))


@functools.cache
def _area_of_name() -> dict[str, str]:
    """Every field's name and variable names -> its area."""
    out: dict[str, str] = {}
    for area_name, area in AREAS.items():
        for field_name in area.model_fields:
            out.update(dict.fromkeys((field_name, *env_names(field_name, area)), area_name))
    return out


def areas_of(data: dict[str, Any], types: dict[str, type[Area]]) -> dict[str, Any]:
    """`Settings` arguments (variable or field names, or whole areas) -> one built area per name."""
    given: dict[str, Any] = {name: value for name, value in data.items() if name in types}
    flat: dict[str, dict[str, Any]] = {name: {} for name in types}
    for name, value in data.items():
        if name in types:
            continue
        if name not in _area_of_name():
            raise ValueError(f"{name} is not a setting (README \"Configuration\")")
        flat[_area_of_name()[name]][name] = value
    for name, area in types.items():
        value = given.get(name)
        if isinstance(value, Area) and flat[name]:
            raise ValueError(f"{', '.join(flat[name])} given beside the whole {name} area")
        if not isinstance(value, Area):
            given[name] = area(**{**(value or {}), **flat[name]})
    return given


def load_settings() -> Settings:
    return Settings()


def from_defaults(**overrides: Any) -> Settings:
    """Settings from the defaults and `overrides` only, never the environment (the generated documents)."""
    return Settings(**areas_of(overrides, {name: defaults_only(area) for name, area in AREAS.items()}))


@functools.cache
def _field_reader(name: str) -> tuple[tuple[str, ...], TypeAdapter[Any], Any]:
    area = AREAS[_area_of_name()[name]]
    field = area.model_fields[name]
    typed: Any = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    return env_names(name, area), TypeAdapter(typed), field.default


def env_setting(name: str) -> Any:
    """One setting (a field's name), read from the environment now and validated as Settings would: for
    the few low-level helpers that run without a Settings at hand (the Redis client builders, a
    consumer's name), where building all of Settings per call would cost milliseconds. Unset or empty:
    the default."""
    names, adapter, default = _field_reader(name)
    raw = next((os.environ[n] for n in names if os.environ.get(n, "").strip()), None)
    return default if raw is None else adapter.validate_python(raw.strip())
