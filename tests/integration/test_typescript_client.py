"""clients/typescript against the real stack: tsc type-checks and compiles the client and its tests, then
Node's test runner runs them (clients/typescript/test/*.test.mts) against this module's stack: sessions,
prompts and their events, heartbeats, uploads, documents with If-Match, a live run steered into by
expected_run_id and aborted, and the events stream resuming across dropped connections."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.needs import needs
from tests.support.stack import API_TOKEN, OTHER_TOKEN, Stack

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "typescript"
NODE = shutil.which("node")
TSC = ROOT / "node_modules" / "typescript" / "bin" / "tsc"
pytestmark = [needs(None if NODE and TSC.exists() else "node or typescript missing (make node)"),
              pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_SSE_HEARTBEAT_S": "1"}  # the heartbeat test waits for one


def test_client_typechecks_and_passes_against_the_stack(module_stack: Stack, tmp_path: Path) -> None:
    assert NODE is not None
    out = tmp_path / "dist"
    compiled = subprocess.run([NODE, str(TSC), "-p", str(CLIENT), "--outDir", str(out)], capture_output=True,
                              text=True, timeout=180, cwd=ROOT)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    env = dict(os.environ, GAMMA_BASE_URL=module_stack.url(), GAMMA_TOKEN=API_TOKEN, GAMMA_OTHER_TOKEN=OTHER_TOKEN)
    tests = [str(out / "test" / name) for name in ("client.test.mjs", "runs.test.mjs")]
    ran = subprocess.run([NODE, "--test", *tests], capture_output=True, text=True, timeout=240, env=env,
                         cwd=tmp_path)
    report = ran.stdout + ran.stderr
    assert ran.returncode == 0, report
    assert "# fail 0" in report and "# pass 9" in report, report
