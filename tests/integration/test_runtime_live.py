"""A live session end to end: wake, prompt, a scripted run, events, transcript on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.runtime_support import Driver
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def runtime_stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory):
    stack = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("rt"))
    stack.start("runtime")
    yield stack
    stack.stop()


def transcript(stack: Stack, sid: str) -> list[dict]:
    path = Path(stack.data_dir) / "sessions" / sid / "transcript.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_prompt_answered_end_to_end(runtime_stack: Stack) -> None:
    d = Driver(runtime_stack.redis_url)
    sid = "live1"
    d.prompt(sid, "hello there")
    d.wake(sid)
    ev = d.wait_event(sid, lambda e: e["type"] == "message_user", what="message_user")
    assert "hello there" in ev["data"]["message"]
    assert ev["data"]["block_on_user"] is True
    d.wait_event(sid, lambda e: e["type"] == "agent_end", what="agent_end")
    entries = transcript(runtime_stack, sid)
    roles = [e.get("message", {}).get("role") for e in entries if e["type"] == "message"]
    assert roles == ["user", "assistant", "toolResult"]
    assert d.live(sid)
