"""The base of every settings area (README "Configuration"): an area reads its own fields from the
environment, each under its flat variable name (the field's `validation_alias`, `GAMMA_*` mostly), never
a nested `GAMMA_AREA__FIELD`: deploy/, compose and the clients' docs name the variables, not the areas."""

from __future__ import annotations

import functools
from typing import TypeVar, cast

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

A = TypeVar("A", bound="Area")


class Area(BaseSettings):
    """One area of the settings; the composed `Settings` (shared/settings/__init__.py) holds one of each."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)


def _arguments_only(cls: type[BaseSettings], settings_cls: type[BaseSettings],
                    init_settings: PydanticBaseSettingsSource, **others: PydanticBaseSettingsSource,
                    ) -> tuple[PydanticBaseSettingsSource, ...]:
    return (init_settings,)


@functools.cache
def defaults_only(area: type[A]) -> type[A]:
    """`area` built from its defaults and its arguments, never the environment: the generated documents
    must not depend on who runs `make docs`."""
    return cast(type[A], type(area.__name__, (area,), {"settings_customise_sources": classmethod(_arguments_only)}))
