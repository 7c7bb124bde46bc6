"""The inspector's timeline for what streams (services/proxy/static/js/timeline_model.js, run by node):
the reasoning summary streaming as a collapsed "reasoning" item, tool calls whose arguments are still
streaming, and a reply the content filter stopped shown as such. Skipped without node."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE = shutil.which("node")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.skipif(NODE is None, reason="node is not installed"), pytest.mark.timeout(60)]


def items(entries: list[dict[str, Any]], live: dict[str, Any]) -> list[dict[str, Any]]:
    assert NODE is not None
    run = subprocess.run([NODE, str(ROOT / "tests" / "js" / "timeline_model.mjs")], cwd=ROOT, text=True,
                         input=json.dumps({"entries": entries, "live": live}), capture_output=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return list(json.loads(run.stdout))


def test_streaming_reasoning_and_tool_progress_are_shown_live() -> None:
    out = items([], {"streamingReasoning": "Plan first.", "streamingText": "Checking.",
                     "toolProgress": {"call_1": {"name": "write", "bytes": 5120}}})
    assert out == [
        {"key": "streaming-reasoning", "kind": "thinking", "streaming": True, "text": "Plan first."},
        {"key": "streaming", "kind": "assistant", "streaming": True, "text": "Checking."},
        {"key": "progress-call_1", "kind": "toolProgress", "name": "write", "bytes": 5120},
    ]


def test_a_content_filtered_reply_shows_as_such() -> None:
    entry = {"type": "message", "id": "e1", "timestamp": "2026-01-01T00:00:00Z", "message": {
        "role": "assistant", "stopReason": "contentFilter", "content": [
            {"type": "thinking", "thinking": "A summary."}, {"type": "text", "text": "Some"}]}}
    out = items([entry], {})
    assert [(i["kind"], i.get("text")) for i in out] == [
        ("thinking", "A summary."), ("assistant", "Some"),
        ("failure", "The provider's content filter stopped this reply.")]
    assert out[-1]["stop"] == "contentFilter"
