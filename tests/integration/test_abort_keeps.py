"""A stop that loses nothing (services/runtime/inbox/abort.py), against the real services: the text streamed
so far stays (marked aborted), the cancelled request's usage is counted (estimated, since the API
never reported it), a tool call that finished before the stop keeps its own result, and a prompt
stopped before the model's first token still gets an (empty, aborted) answer: no orphaned user message.

The scripted model here waits 4 s before its first token and then streams 40 tokens a second."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from tests.integration.runtime_support import stream_payloads
from tests.support.polling import wait_sync
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(240)
LONG_TEXT = " ".join(f"word{n}" for n in range(800))


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_SCRIPTED_TOKENS_PER_S": "40", "GAMMA_SCRIPTED_TTFT_MS": "4000"}


def script(*steps: dict[str, Any]) -> str:
    return "script:" + json.dumps(list(steps))


def messages(stack: Stack, sid: str) -> list[dict[str, Any]]:
    path = stack.data_dir / "sessions" / sid / "transcript.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e["message"] for e in entries if e["type"] == "message"]


def streamed(r: redis.Redis, sid: str) -> bool:
    return any(json.loads(f[b"data"])["type"] == "message_update" for _, f in r.xrange(keys.events(sid)))


def start(api: httpx.Client, message: str) -> str:
    sid = str(api.post("/sessions").json()["id"])
    assert api.post(f"/sessions/{sid}/messages", json={"message": message}).status_code == 202
    wait_sync(lambda: api.get(f"/sessions/{sid}").json()["running"], timeout=60, interval=0.05, what="the run")
    return sid


def abort(api: httpx.Client, sid: str) -> None:
    res = api.post(f"/sessions/{sid}/abort")
    assert res.status_code == 200 and res.json()["aborted"] is True, res.text


def test_a_stop_before_the_first_token_leaves_no_orphaned_prompt(api: httpx.Client, r: redis.Redis,
                                                                 module_stack: Stack) -> None:
    sid = start(api, "stop me before you speak")
    assert not streamed(r, sid)
    abort(api, sid)
    roles = [(m["role"], m.get("stopReason")) for m in messages(module_stack, sid)]
    at = roles.index(("user", None))
    assert roles[at + 1] == ("assistant", "aborted")
    answer = messages(module_stack, sid)[at + 1]
    assert answer["content"] == [] or all(not c.get("text") for c in answer["content"])
    # the next prompt runs normally, after an answered one
    assert api.post(f"/sessions/{sid}/messages", json={"message": "and now"}).status_code == 202
    wait_sync(lambda: [m["role"] for m in messages(module_stack, sid)][-1] == "toolResult", timeout=60,
              what="the next run's reply")
    users = [i for i, m in enumerate(messages(module_stack, sid)) if m["role"] == "user"]
    assert all(messages(module_stack, sid)[i + 1]["role"] == "assistant" for i in users)


def test_a_stop_mid_stream_keeps_the_text_and_counts_the_usage(api: httpx.Client, r: redis.Redis,
                                                               module_stack: Stack) -> None:
    sid = start(api, script({"content": LONG_TEXT}))
    wait_sync(lambda: streamed(r, sid), timeout=30, interval=0.05, what="streamed text")
    abort(api, sid)
    last = [m for m in messages(module_stack, sid) if m["role"] == "assistant"][-1]
    assert last["stopReason"] == "aborted"
    text = "".join(c.get("text", "") for c in last["content"])
    assert text and LONG_TEXT.startswith(text) and len(text) < len(LONG_TEXT)
    usage = last["usage"]
    assert usage["estimated"] is True and usage["input"] > 0 and usage["output"] > 0
    counted = api.get(f"/sessions/{sid}").json()["model_usage"]
    assert counted["requests"] >= 1 and counted["input_tokens"] >= usage["input"]


def test_a_tool_call_that_finished_before_the_stop_keeps_its_result(api: httpx.Client, r: redis.Redis,
                                                                     module_stack: Stack) -> None:
    # The fast call's last act is publishing the file it made (tools/bash.py `_publish_changes`), so
    # its change on the artifact stream means its result is made; the slow one sleeping is not enough
    # (a parallel batch's calls all end together, no per-call event says the fast one is done).
    calls = [{"name": "bash", "arguments": {"command": "echo finished-first; : > fast.done", "timeout": 60}},
             {"name": "bash", "arguments": {"command": "sleep 30.871", "timeout": 120}}]
    sid = start(api, script({"tool_calls": calls}, {"content": "never"}))
    wait_sync(lambda: any(c.get("session_id") == sid and c.get("ref") == "file:fast.done"
                          for c in stream_payloads(r, keys.ARTIFACT_CHANGES)),
              timeout=60, interval=0.05, what="the fast call's file published")
    wait_sync(lambda: _sleeping("sleep 30.871"), timeout=30, interval=0.05, what="the slow call")
    abort(api, sid)
    results = {m["content"][0]["text"].splitlines()[0]: m for m in messages(module_stack, sid) if m["role"] == "toolResult"}
    fast = [m for m in results.values() if "finished-first" in m["content"][0]["text"]]
    assert fast and fast[0]["isError"] is False and "stopped" not in fast[0]["content"][0]["text"]
    slow = [m for m in results.values() if "finished-first" not in m["content"][0]["text"]]
    assert slow and slow[0]["isError"] is True and "The user stopped the run" in slow[0]["content"][0]["text"]


def _sleeping(marker: str) -> bool:
    from pathlib import Path

    for pid in Path("/proc").iterdir():
        try:
            cmd = (pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, NotADirectoryError):
            continue
        if marker in cmd and "bash -c" not in cmd:
            return True
    return False
