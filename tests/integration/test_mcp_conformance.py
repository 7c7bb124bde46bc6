"""The MCP conformance suite's client scenarios against the harness's MCP client
(tests/support/mcp_conformance_client.py, the code the harness lists and calls servers with).

`@modelcontextprotocol/conformance` 0.1.10 is the newest release that runs on Node 20 (0.1.14 and
later, 0.2.0-alpha.* included, import `fs.globSync`, Node 22): its client scenarios are 2025-era
only (no 2026-07-28 scenario). Run here: `initialize` (the handshake after the 2026-07-28 probe is
refused) and `sse-retry` (a broken SSE stream resumed with Last-Event-ID after the `retry` delay).
Not run: `tools_call` (its server answers every request after the first with a 500, "Already
connected to a transport", under the SDK it resolves to today), the `auth/*` scenarios (OAuth
discovery and the authorization-code flow: the harness takes a configured token URL), and
`elicitation-*` (the harness declares no elicitation)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.zygote import ROOT

CONFORMANCE = ROOT / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group("mcp-conformance")]


@pytest.mark.parametrize("scenario", ["initialize", "sse-retry"])
def test_a_client_scenario_passes(scenario: str, tmp_path: Path) -> None:
    assert CONFORMANCE.exists(), "run `npm install` (package.json devDependencies)"
    client = f"{ROOT / '.venv' / 'bin' / 'python'} -m tests.support.mcp_conformance_client"
    done = subprocess.run(["node", str(CONFORMANCE), "client", "--command", client, "--scenario", scenario,
                           "-o", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert "OVERALL: PASSED" in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr[-2000:]
    (checks,) = tmp_path.glob(f"{scenario}-*/checks.json")
    results = json.loads(checks.read_text())
    assert [c for c in results if c["status"] == "SUCCESS"], results
    assert not [c for c in results if c["status"] == "FAILURE"], results
