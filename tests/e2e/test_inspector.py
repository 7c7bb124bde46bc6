"""The session inspector in headless Chromium (Debian's `chromium`, driven by node `playwright-core`):
open the page with ?token=, create a session, send a message, see the scripted agent's reply stream in,
see the trusted injection marked in the raw transcript, suspend. Saves a screenshot under
tests/e2e/artifacts/. Skipped only when chromium or playwright-core is absent."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.stack import API_TOKEN, Stack

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
NODE = shutil.which("node")
ARTIFACTS = ROOT / "tests" / "e2e" / "artifacts"
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or NODE is None or not (ROOT / "node_modules" / "playwright-core").is_dir(),
    reason="needs chromium, node and `npm install` (playwright-core)",
)


def test_inspector_talks_to_the_scripted_agent(module_stack: Stack) -> None:
    assert NODE is not None and CHROMIUM is not None
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "inspector.png"
    screenshot.unlink(missing_ok=True)
    done = subprocess.run(
        [NODE, str(ROOT / "tests" / "js" / "inspector.mjs"), module_stack.url(), API_TOKEN, CHROMIUM, str(screenshot)],
        cwd=ROOT, capture_output=True, text=True, timeout=400, check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "error" not in out, out["error"]
    assert "token=" not in out["urlAfterLoad"] and out["storedToken"] == API_TOKEN
    assert out["sessionId"].startswith("s_") and out["badgeBefore"] == "dormant"
    assert "You said: 'hello from the browser'" in out["reply"]
    assert out["badgeLive"] == "live" and out["badgeAfterSuspend"] == "dormant"
    assert any("hello from the browser" in text for text in out["userBubbles"])
    assert out["transcriptEntries"] >= 3
    assert out["trustedEntries"] >= 1 and any("client_view" in t for t in out["trustedTags"]), out
    assert "message_user" in out["eventTypes"]
    assert out["consoleErrors"] == []
    assert screenshot.stat().st_size > 10_000
