"""tests/support/needs.py through pytest itself: a test whose tool is missing is skipped on a developer
machine and fails under CI, as a `needs` mark (module or test) and as `missing()` inside a test; a test
whose tool is there runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.needs import under_ci

ROOT = Path(__file__).resolve().parents[2]
MODULE = '''
import pytest
from tests.support.needs import missing, needs

pytestmark = needs(None)

@needs("frobnicator missing")
def test_marked():
    raise AssertionError("ran without its tool")

def test_inside():
    missing("widget missing")

@needs(None)
def test_present():
    pass
'''


def run(tmp_path: Path, ci: str | None) -> str:
    (tmp_path / "test_tools.py").write_text(MODULE)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    # tests/conftest.py as a plugin: its set-up hook is what turns the marks into skips or failures.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsE", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "--rootdir", str(tmp_path), "-c", os.devnull, "test_tools.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return proc.stdout + proc.stderr


def test_a_missing_tool_skips_off_ci(tmp_path: Path) -> None:
    out = run(tmp_path, None)
    assert "1 passed, 2 skipped" in out, out
    assert "frobnicator missing" in out and "widget missing" in out


def test_a_missing_tool_fails_under_ci(tmp_path: Path) -> None:
    out = run(tmp_path, "true")
    assert "1 failed, 1 passed, 1 error" in out, out
    assert "ran without its tool" not in out
    assert out.count(".ci/run installs it") >= 2


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("1", True), ("false", False), ("0", False),
                                                 ("", False), (None, False)])
def test_ci_variable(monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert under_ci() is expected
