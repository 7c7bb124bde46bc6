"""The size guards (README "Code standards"), run by .ci/run: ruff's size rules (pyproject.toml: C901, PLR0912,
PLR0915) fail a long function in shared/ or services/, and no module there grows past ~400 lines
(ruff has no rule for a file's length)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.deploy.support import ROOT

RUFF = Path(sys.executable).with_name("ruff")
MAX_FILE_LINES = 400
# README "Code standards": modules to split, each named with its reason (none today).
TO_SPLIT: set[str] = set()


def ruff_codes(path: Path) -> set[str]:
    proc = subprocess.run(
        [str(RUFF), "check", "--config", str(ROOT / "pyproject.toml"), "--select", "C901,PLR0912,PLR0915",
         "--output-format", "json", "--no-cache", str(path)], capture_output=True, text=True, timeout=60,
    )
    return {finding["code"] for finding in json.loads(proc.stdout)}


def function(statements: int, branches: int = 0) -> str:
    body = [f"    a += {i}" for i in range(statements)]
    body += [f"    if a == {i}:\n        return {i}" for i in range(branches)]
    return "def f(a: int) -> int:\n" + "\n".join(body) + "\n    return 0\n"


def test_a_long_function_fails_and_a_short_one_passes(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text(function(25, branches=8))
    (tmp_path / "long.py").write_text(function(60))
    (tmp_path / "branchy.py").write_text(function(10, branches=16))
    assert ruff_codes(tmp_path / "short.py") == set()
    assert ruff_codes(tmp_path / "long.py") == {"PLR0915"}
    assert ruff_codes(tmp_path / "branchy.py") == {"PLR0912", "C901"}


def test_library_and_service_modules_stay_small() -> None:
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines())
        for root in ("shared", "services", "scripted") for p in (ROOT / root).rglob("*.py")
    }
    too_long = {name: n for name, n in sizes.items() if n > MAX_FILE_LINES and name not in TO_SPLIT}
    assert not too_long, f"split these modules (over {MAX_FILE_LINES} lines): {too_long}"
