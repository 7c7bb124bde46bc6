"""The scripted model stays a test double (scripted/README.md): import-linter's contract forbids every
production package to import it, and a production module that did would break `lint-imports`."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from tests.deploy.support import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PRODUCTION = {"shared", "tools", "services.proxy", "services.runtime", "services.notifications", "services.digest",
              "services.compaction"}


def contract() -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (found,) = [c for c in config["contracts"] if c.get("forbidden_modules") == ["scripted"]]
    return dict(found)


def test_every_production_package_is_a_source_of_the_contract() -> None:
    found = contract()
    assert found["type"] == "forbidden" and set(found["source_modules"]) == PRODUCTION


def test_a_production_import_of_the_scripted_model_breaks_the_contract(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", ".venv", "node_modules", "data", "*.pyc",
                                                             "bench", "tests", "clients", "docs"))
    (tree / "shared" / "offender.py").write_text("from scripted.types import ScriptedReply\n")
    proc = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "no production package imports the scripted model BROKEN" in proc.stdout
