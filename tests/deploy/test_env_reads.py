"""Settings are read in one place (README "Configuration"): ruff's banned-api rule (pyproject.toml,
TID251) fails an `os.environ` / `os.getenv` read in a production module (an area module of the settings
too: it reads through pydantic-settings), and lets the settings package's `env_setting`, the process
launchers, tests and benchmarks through."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.support import ROOT

RUFF = Path(sys.executable).with_name("ruff")
READS = {
    "attribute": "import os\n\nX = os.environ.get('GAMMA_X')\n",
    "getenv": "import os\n\nX = os.getenv('GAMMA_X')\n",
    "imported": "from os import environ\n\nX = environ['GAMMA_X']\n",
}


def codes(filename: str, source: str) -> set[str]:
    """ruff's findings for `source` as if it were the repository's file `filename` (its per-file rules)."""
    proc = subprocess.run(
        [str(RUFF), "check", "--config", str(ROOT / "pyproject.toml"), "--output-format", "json", "--no-cache",
         "--stdin-filename", filename, "-"], input=source, capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    return {finding["code"] for finding in json.loads(proc.stdout)}


@pytest.mark.parametrize("filename", ["shared/example.py", "shared/settings/runtime.py", "services/runtime/example.py",
                                      "tools/example.py"])
@pytest.mark.parametrize("kind", sorted(READS))
def test_an_environment_read_in_a_production_module_fails(filename: str, kind: str) -> None:
    assert "TID251" in codes(filename, READS[kind])


@pytest.mark.parametrize("filename", ["shared/settings/__init__.py", "services/stack.py", "tests/unit/example.py",
                                      "bench/example.py"])
def test_the_settings_module_launchers_and_tests_may_read_it(filename: str) -> None:
    assert "TID251" not in codes(filename, READS["attribute"])


def test_the_production_packages_read_no_environment_outside_settings() -> None:
    proc = subprocess.run(
        [str(RUFF), "check", "--config", str(ROOT / "pyproject.toml"), "--select", "TID251", "--output-format",
         "json", "--no-cache", "shared", "services", "scripted", "tools"], capture_output=True, text=True, timeout=120,
        cwd=ROOT,
    )
    assert [f"{f['filename']}:{f['location']['row']}" for f in json.loads(proc.stdout)] == []
