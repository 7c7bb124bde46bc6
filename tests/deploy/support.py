"""Helpers shared by the deployment tests: the settings' env names and the services' entry points."""

from __future__ import annotations

import importlib
from pathlib import Path

from shared import topology
from shared.settings import AREAS, env_names

ROOT = Path(__file__).resolve().parents[2]
GAMMA_SERVICES = set(topology.SERVICES)


def setting_env_names() -> set[str]:
    """Every environment variable name Settings reads (its validation aliases)."""
    return {name for area in AREAS.values() for field in area.model_fields for name in env_names(field, area)}


def entry_point_service(command: list[str]) -> str:
    """`["python", "-m", "services.runtime"]` -> "runtime", after checking the module really is one.

    Imports `services.<name>.__main__` (its `main()` runs only under `__name__ == "__main__"`) and
    requires a callable `main`, which is what `python -m services.<name>` executes.
    """
    assert command[:2] == ["python", "-m"], f"not a `python -m` command: {command}"
    assert len(command) == 3, f"extra arguments the entry points do not take: {command}"
    module = command[2]
    assert module.startswith("services."), module
    name = module.removeprefix("services.")
    assert name in GAMMA_SERVICES, f"{name} is not one of {sorted(GAMMA_SERVICES)}"
    main_module = importlib.import_module(f"{module}.__main__")
    assert callable(getattr(main_module, "main", None)), f"{module}.__main__ has no main()"
    return name
