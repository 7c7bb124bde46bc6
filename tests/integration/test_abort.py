"""Abort, interrupt and expected_run_id (docs/integration.md "Abort and interrupt"), against the real services.

The scripted model streams at 40 tokens a second here, so a 4,000-character reply takes ~25 s and
an abort lands mid-stream; the 30 s `bash` calls run in the real sandbox, and each carries an odd
`sleep` duration so its process is found (and found gone) in /proc by its command line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared.contracts.streams.inbox import UserPrompt
from shared.redis import keys
from shared.trust.trusted_blocks import extract
from tests.support.polling import wait_sync
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(300)
LONG_TEXT = " ".join(f"word{n}" for n in range(800))  # ~4,700 characters: ~30 s at 40 tokens/s
CHILD_TEXT = " ".join(f"word{n}" for n in range(200))  # ~8 s at 40 tokens/s
OVERFLOW = {"status": 400, "code": "context_length_exceeded",
            "message": "This model's maximum context length is 16000 tokens. However, your messages resulted in "
                       "17210 tokens. Please reduce the length of the messages."}


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_SCRIPTED_TOKENS_PER_S": "40", "GAMMA_KEEP_RECENT_TOKENS": "50"}


def script(*steps: dict[str, Any]) -> str:
    return "script:" + json.dumps(list(steps))


def bash_step(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command, "timeout": 120}}]}


def events(r: redis.Redis, sid: str, kind: str | None = None) -> list[dict[str, Any]]:
    out = [json.loads(f[b"data"]) for _, f in r.xrange(keys.events(sid))]
    return [e for e in out if kind is None or e["type"] == kind]


def transcript(stack: Stack, sid: str) -> list[dict[str, Any]]:
    path = stack.data_dir / "sessions" / sid / "transcript.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def messages(stack: Stack, sid: str) -> list[dict[str, Any]]:
    return [e["message"] for e in transcript(stack, sid) if e["type"] == "message"]


def assert_valid(stack: Stack, sid: str) -> None:
    """Every tool call has exactly one result, before the next assistant message or user prompt."""
    open_calls: set[str] = set()
    for m in messages(stack, sid):
        if m["role"] in ("assistant", "user"):
            assert not open_calls, f"tool calls without a result: {open_calls}"
        if m["role"] == "assistant":
            open_calls = {c["id"] for c in m["content"] if c["type"] == "toolCall"}
        elif m["role"] == "toolResult":
            assert m["toolCallId"] in open_calls, f"a result for an unknown call: {m['toolCallId']}"
            open_calls.discard(m["toolCallId"])


def pids_running(marker: str) -> list[int]:
    """Processes (any namespace, as the host sees them) whose command line contains `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if marker in cmd and "bash -c" not in cmd and state != "Z":
            found.append(int(pid))
    return found


def session(api: httpx.Client) -> str:
    sid = str(api.post("/sessions").json()["id"])
    assert api.post(f"/sessions/{sid}/messages", json={"message": "hello"}).status_code == 202
    wait_reply(api, sid, "hello")
    return sid


def replies(api: httpx.Client, sid: str) -> list[str]:
    return [e["text"] for e in api.get(f"/sessions/{sid}/preview").json()["transcript"] if e["kind"] == "message_user"]


def wait_reply(api: httpx.Client, sid: str, fragment: str) -> None:
    wait_sync(lambda: any(fragment in t for t in replies(api, sid)), timeout=60, interval=0.2,
              what=f"a reply with {fragment!r}")
    wait_sync(lambda: not api.get(f"/sessions/{sid}").json()["running"], timeout=30, what="the run's end")


def start_run(api: httpx.Client, sid: str, message: str) -> str:
    """Send `message` and return the id of the run it starts (GET /sessions/{id} shows it)."""
    assert api.post(f"/sessions/{sid}/messages", json={"message": message}).status_code == 202
    view = wait_sync(lambda: (v := api.get(f"/sessions/{sid}").json())["running"] and v, timeout=30,
                     interval=0.05, what="the run")
    run_id = view["run_id"]
    assert run_id and run_id.startswith("run_")
    return str(run_id)


def abort(api: httpx.Client, sid: str, **body: str) -> httpx.Response:
    return api.post(f"/sessions/{sid}/abort", json=body or None)


def after_abort_the_next_prompt_works(api: httpx.Client, stack: Stack, sid: str, text: str) -> None:
    assert api.post(f"/sessions/{sid}/messages", json={"message": text}).status_code == 202
    wait_reply(api, sid, text)
    assert_valid(stack, sid)


def test_abort_during_streaming(api: httpx.Client, r: redis.Redis, module_stack: Stack) -> None:
    sid = session(api)
    run_id = start_run(api, sid, script({"content": LONG_TEXT}))
    wait_sync(lambda: any(e.get("run_id") == run_id for e in events(r, sid, "message_update")), timeout=30,
              what="streamed text")
    started = time.monotonic()
    res = abort(api, sid)
    took = time.monotonic() - started
    assert res.status_code == 200, res.text
    assert res.json()["aborted"] is True and res.json()["run_id"] == run_id
    print(f"\nabort during streaming: answered in {took * 1000:.0f} ms")
    view = api.get(f"/sessions/{sid}").json()
    assert view["running"] is False and view["run_id"] is None
    [ended] = [e for e in events(r, sid, "run_aborted") if e["data"]["run_id"] == run_id]
    assert ended["data"]["reason"] == "user"
    assert any(e["run_id"] == run_id for e in events(r, sid, "agent_end"))
    last = [m for m in messages(module_stack, sid) if m["role"] == "assistant"][-1]
    assert last["stopReason"] == "aborted"
    streamed = "".join(c.get("text", "") for c in last["content"])
    assert streamed and len(streamed) < len(LONG_TEXT) and LONG_TEXT.startswith(streamed)
    # idempotent: no run now
    again = abort(api, sid)
    assert again.status_code == 200 and again.json()["aborted"] is False
    after_abort_the_next_prompt_works(api, module_stack, sid, "after the stream")


def test_abort_kills_a_30s_bash_call_within_a_second_twice_in_a_row(api: httpx.Client, r: redis.Redis,
                                                                    module_stack: Stack) -> None:
    sid = session(api)
    todo = {"tool_calls": [{"name": "todo", "arguments": {"items": [
        {"id": "a", "content": "Wait for the sleep", "status": "in_progress"}]}}]}
    run_id = start_run(api, sid, script(todo, bash_step("echo started; sleep 30.417; echo never"), {"content": "x"}))
    pids = wait_sync(lambda: pids_running("sleep 30.417"), timeout=30, interval=0.05, what="the sleep process")
    started = time.monotonic()
    first, second = abort(api, sid), abort(api, sid)
    assert first.status_code == 200 and first.json() == {"aborted": True, "run_id": run_id, "kept": 0}
    assert second.status_code == 200 and second.json()["aborted"] is False
    # Killed, not ended: a sleep of 30 s is gone long before its time (the latency is bench-e2e's).
    wait_sync(lambda: not pids_running("sleep 30.417"), timeout=15, interval=0.02, what="the sleep gone")
    print(f"\nabort during bash: process gone and both answers in {(time.monotonic() - started) * 1000:.0f} ms")
    assert all(not Path(f"/proc/{p}").exists() or "Z" in Path(f"/proc/{p}/stat").read_text() for p in pids)
    result = [m for m in messages(module_stack, sid) if m["role"] == "toolResult"][-1]
    assert result["toolName"] == "bash" and result["isError"] is True
    text = result["content"][0]["text"]
    assert "The user stopped the run" in text and "started" in text and "never" not in text
    entries = transcript(module_stack, sid)
    assert entries[-1]["type"] == "custom_message" and entries[-1]["customType"] == "gamma.run_aborted"
    todo_now = api.get(f"/sessions/{sid}/preview").json()["todo"]
    assert [i["status"] for i in todo_now["items"]] == ["in_progress"]  # the todo keeps its state
    after_abort_the_next_prompt_works(api, module_stack, sid, "after the bash")


def inbox_results(r: redis.Redis, sid: str) -> list[str]:
    """The background_result injections appended to the session's inbox so far."""
    out = [json.loads(f[b"data"]) for _, f in r.xrange(keys.inbox(sid)) if f[b"type"] == b"injection"]
    return [i["injection"]["content"] for i in out if i["injection"]["kind"] == "background_result"]


@pytest.mark.parametrize("how", ["abort", "interrupt"])
def test_abort_and_interrupt_stop_the_runs_subagent(how: str, api: httpx.Client, r: redis.Redis,
                                                    module_stack: Stack) -> None:
    """The subagent streams a ~8 s answer (the run streams its task as long first); stopping the run
    stops it too, and its answer (sent at once) says the user stopped it, with what it had found so far."""
    sid = session(api)
    child = script({"content": CHILD_TEXT})
    sleep = f"sleep 30.7{len(how)}"
    run_id = start_run(api, sid, script({"tool_calls": [{"name": "subagent", "arguments": {"task": child}}]},
                                        bash_step(sleep), {"content": "x"}))
    wait_sync(lambda: pids_running(sleep), timeout=30, interval=0.05, what="the sleep process")
    time.sleep(1.0)  # the subagent's stream has begun
    started = time.monotonic()
    if how == "abort":
        assert abort(api, sid).json()["aborted"] is True
    else:
        assert api.post(f"/sessions/{sid}/messages", json={"message": "never mind", "on_busy": "interrupt",
                                                           "expected_run_id": run_id}).status_code == 202
    [result] = wait_sync(lambda: inbox_results(r, sid), timeout=3, interval=0.05, what="the subagent's answer")
    print(f"\n{how}: the subagent answered {(time.monotonic() - started) * 1000:.0f} ms after it")
    assert 'status="stopped"' in result
    assert ("The user stopped the run (Stop)" if how == "abort" else "The user interrupted the run") in result
    answer = extract(result, "quoted")  # the child's words, quoted inside the block
    assert answer is not None
    partial = answer[0].split("Findings before the stop:\n", 1)[1]
    assert partial and len(partial) < len(CHILD_TEXT) and CHILD_TEXT.startswith(partial)
    after_abort_the_next_prompt_works(api, module_stack, sid, "after the subagent")
    def background_results() -> list[str]:
        return [e["content"] for e in transcript(module_stack, sid) if e.get("customType") == "gamma.background_result"]
    # Recorded with the next turn it joins (the interrupting prompt's run, or the one after it). At times
    # it is still held after both (seen with the interrupt, about one run in four on a loaded machine, on
    # main before and after the runtime's recomposition; cause not found): the next user turn carries it.
    if not background_results():
        after_abort_the_next_prompt_works(api, module_stack, sid, "anything else?")
    recorded = wait_sync(background_results, timeout=20, interval=0.2, what="the recorded background_result")
    assert len(recorded) == 1 and 'status="stopped"' in recorded[0]  # recorded once, the stopped answer
    time.sleep(1.0)  # scenario: a subagent that kept going would answer again meanwhile
    assert len(inbox_results(r, sid)) == 1, "the subagent kept going after it answered"


def test_interrupt_while_a_tool_runs(api: httpx.Client, r: redis.Redis, module_stack: Stack) -> None:
    sid = session(api)
    run_id = start_run(api, sid, script(bash_step("sleep 30.529"), {"content": "x"}))
    wait_sync(lambda: pids_running("sleep 30.529"), timeout=30, interval=0.05, what="the sleep process")
    res = api.post(f"/sessions/{sid}/messages", json={"message": "stop that and say hi", "on_busy": "interrupt",
                                                      "expected_run_id": run_id})
    assert res.status_code == 202, res.text
    wait_sync(lambda: not pids_running("sleep 30.529"), timeout=5, interval=0.05, what="the sleep gone")
    wait_reply(api, sid, "stop that and say hi")
    [ended] = [e for e in events(r, sid, "run_aborted") if e["data"]["run_id"] == run_id]
    assert ended["data"]["reason"] == "interrupt"
    kinds = [(e["type"], e.get("customType"), (e.get("message") or {}).get("role")) for e in transcript(module_stack, sid)]
    marker_at = kinds.index(("custom_message", "gamma.run_aborted", None))
    assert kinds[marker_at + 1] == ("message", None, "user")  # the new message right after the marker
    result = [m for m in messages(module_stack, sid) if m["role"] == "toolResult"][-2]
    assert "interrupted the run" in result["content"][0]["text"]
    new_runs = {e["run_id"] for e in events(r, sid, "status") if e["run_id"] and e["run_id"] != run_id}
    assert new_runs, "the interrupting message ran as a new run"
    assert_valid(module_stack, sid)


def test_a_stale_expected_run_id_is_refused_and_nothing_is_queued(api: httpx.Client, r: redis.Redis,
                                                                  module_stack: Stack) -> None:
    sid = session(api)
    ended = start_run(api, sid, "a short one")
    wait_reply(api, sid, "a short one")
    inbox_before = r.xlen(keys.inbox(sid))
    for on_busy in ("steer", "follow_up", "interrupt"):
        res = api.post(f"/sessions/{sid}/messages", json={"message": "late", "on_busy": on_busy,
                                                          "expected_run_id": ended})
        assert res.status_code == 409 and res.json()["detail"] == {"run_id": None}, res.text
    assert abort(api, sid, expected_run_id=ended).status_code == 409
    # while another run is active: still refused, and that run goes on
    active = start_run(api, sid, script(bash_step("sleep 30.631"), {"content": "x"}))
    res = api.post(f"/sessions/{sid}/messages", json={"message": "late", "expected_run_id": ended})
    assert res.status_code == 409 and res.json()["detail"] == {"run_id": active}
    assert abort(api, sid, expected_run_id=ended).status_code == 409
    assert api.get(f"/sessions/{sid}").json()["run_id"] == active
    assert r.xlen(keys.inbox(sid)) == inbox_before + 1  # only the prompt that started `active`
    # the matching id steers into the run; then aborting it by id works
    assert api.post(f"/sessions/{sid}/messages", json={"message": "steered in", "expected_run_id": active}
                    ).status_code == 202
    res = abort(api, sid, expected_run_id=active)
    assert res.status_code == 200 and res.json()["aborted"] is True and res.json()["kept"] == 1
    assert not any(m.get("content") == "late" for m in messages(module_stack, sid) if m["role"] == "user")
    # the steer that never reached the model is kept for the next prompt, before it
    after_abort_the_next_prompt_works(api, module_stack, sid, "next after kept")
    users = [m["content"] for m in messages(module_stack, sid) if m["role"] == "user"]
    assert users[-2:] == ["steered in", "next after kept"]


def test_the_runtime_refuses_a_prompt_whose_run_ended_after_the_proxy_checked(api: httpx.Client, r: redis.Redis,
                                                                             module_stack: Stack) -> None:
    """The proxy saw the run active; it ended before the runtime took the entry: 409 on the reply
    key, the entry acked, nothing recorded or queued."""
    sid = session(api)
    ended = start_run(api, sid, "short again")
    wait_reply(api, sid, "short again")
    raced = UserPrompt(session_id=sid, message="raced in late", expected_run_id=ended, request_id="r_raced")
    r.xadd(keys.inbox(sid), {"type": raced.type, "data": raced.model_dump_json(by_alias=True)})
    got = r.blpop([keys.reply(sid, "r_raced")], timeout=30)
    assert got is not None
    reply = json.loads(got[1])
    assert reply["status"] == 409 and reply["body"]["detail"] == {"run_id": None}
    wait_sync(lambda: not r.xpending(keys.inbox(sid), keys.RUNTIME_GROUP)["pending"], timeout=10, what="the ack")
    after_abort_the_next_prompt_works(api, module_stack, sid, "and then this")
    assert "raced in late" not in [m.get("content") for m in messages(module_stack, sid) if m["role"] == "user"]


def test_abort_while_compaction_is_pending(api: httpx.Client, r: redis.Redis, module_stack: Stack) -> None:
    sid = session(api)
    for n in range(3):  # some history, so that there is something to compact
        assert api.post(f"/sessions/{sid}/messages", json={"message": f"history {n} " + "text " * 40}).status_code == 202
        wait_reply(api, sid, f"history {n}")
    module_stack.kill("compaction")
    try:
        run_id = start_run(api, sid, script({"error": OVERFLOW}, {"content": "after compaction"}))
        wait_sync(lambda: any(e["data"].get("phase") == "requested" for e in events(r, sid, "compaction")),
                  timeout=30, what="a compaction request")
        started = time.monotonic()
        res = abort(api, sid)
        # Answered at all: the compaction service is down, so an abort that waited for its answer never would be.
        assert res.status_code == 200 and res.json()["aborted"] is True and res.json()["run_id"] == run_id
        print(f"\nabort while compaction pending: answered in {(time.monotonic() - started) * 1000:.0f} ms")
        assert api.get(f"/sessions/{sid}").json()["running"] is False
    finally:
        module_stack.start("compaction")
    wait_sync(lambda: any(e["data"].get("phase") in ("applied", "stale")
                          for e in events(r, sid, "compaction")), timeout=60, what="the compaction's answer")
    after_abort_the_next_prompt_works(api, module_stack, sid, "after compaction")
