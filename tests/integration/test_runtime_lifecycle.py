"""Wake, barrier, dormant-artifact manifest, Stop, idle, compaction apply on the runtime side, subagents."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.runtime.runs.compaction_trigger import make_request
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.pending import PendingArtifact, PendingArtifactUpdates
from shared.contracts.records.transcript import parse_entries
from shared.contracts.streams.inbox import Barrier, Compact, CompactionReady, Injection, Stop
from shared.redis import keys
from shared.storage.disk import atomic_write_json
from tests.integration.runtime_support import Driver, call, done, kinds, script, stream_payloads, transcript
from tests.support.stack import Stack

IDLE_S = 3


@pytest.fixture(scope="module")
def rt(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("rt"),
                  env_overrides={"GAMMA_IDLE_S": str(IDLE_S)})
    stack.start("runtime")
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def d(rt: Stack) -> Driver:
    return Driver(rt.redis_url)


def lifecycle(d: Driver, sid: str) -> list[dict]:
    return [p for p in stream_payloads(d.r, keys.LIFECYCLE) if p["session_id"] == sid]


def runs(d: Driver, sid: str) -> int:
    return sum(1 for e in d.events(sid) if e["type"] == "agent_end")


def test_wake_holds_prompt_until_barrier_and_puts_injections_first(rt: Stack, d: Driver) -> None:
    sid = "wake1"
    manifest = PendingArtifactUpdates(updates={"file:brief.xml": PendingArtifact(
        digest="The user edited the audience section.", from_revision=3, to_revision=5,
        source_id="file:brief.xml@5")})
    atomic_write_json(Path(rt.data_dir) / "sessions" / sid / "pending_artifacts.json", manifest)
    prompt = d.prompt(sid, "continue please")
    wake_id = d.wake(sid)
    d.wait_event(sid, lambda e: e["type"] == "status" and e["data"]["status"] == "live", what="live")
    live = lifecycle(d, sid)
    assert live[0]["type"] == "session_live" and live[0]["wake_id"] == wake_id and live[0]["fence"] == 1
    d.append(Injection(session_id=sid, injection=RuntimeInjection(
        kind="system_update", content="<system_update>import.completed: deck.pptx</system_update>"),
        source="notification", source_id="n-1"))
    time.sleep(1.0)  # scenario: nothing may happen meanwhile (no event marks an absence)
    assert kinds(transcript(rt.data_dir, sid)) == ["session"]  # the prompt waits for the barrier
    d.append(Barrier(session_id=sid, wake_id=wake_id))
    d.wait_event(sid, lambda e: e["type"] == "message_user", what="answer")
    k = kinds(transcript(rt.data_dir, sid))
    assert k[:4] == ["session", "gamma.system_update", "gamma.artifact_update", "user"]
    entries = transcript(rt.data_dir, sid)
    art = next(e for e in entries if e["type"] == "custom_message" and e["customType"] == "gamma.artifact_update")
    assert 'ref="file:brief.xml" from_revision="3" to_revision="5"' in art["content"]
    assert art["details"]["sourceId"] == "file:brief.xml@5"
    user = next(e for e in entries if e["type"] == "message" and e["message"]["role"] == "user")
    assert user["promptId"] == prompt.prompt_id
    recorded = {p["source_id"] for p in stream_payloads(d.r, keys.INJECTIONS_RECORDED) if p["session_id"] == sid}
    assert recorded == {"n-1", "file:brief.xml@5"}
    answer = d.message_users(sid)[0]["message"]
    assert "system_update" in answer and "artifact_update (ref=file:brief.xml)" in answer


def test_prompt_goes_on_without_barrier_after_three_seconds(rt: Stack, d: Driver) -> None:
    sid = "nobarrier1"
    d.prompt(sid, "hello")
    d.wake(sid)
    d.wait_event(sid, lambda e: e["type"] == "message_user", timeout=20, what="answer without barrier")


def test_stop_goes_dormant_and_wake_restores_the_conversation(rt: Stack, d: Driver) -> None:
    sid = "stop1"
    wake_id = d.wake(sid)
    d.append(Barrier(session_id=sid, wake_id=wake_id))
    d.prompt(sid, "remember the word heliotrope")
    d.wait_event(sid, lambda e: e["type"] == "message_user", what="first answer")
    stop = Stop(session_id=sid)
    d.append(stop)
    assert d.reply(sid, stop.request_id)["body"] == {"status": "dormant"}
    d.wait_event(sid, lambda e: e["type"] == "status" and e["data"]["status"] == "dormant", what="dormant")
    assert not d.live(sid)
    assert [p["type"] for p in lifecycle(d, sid)] == ["session_live", "session_dormant"]
    wake_id = d.wake(sid)
    d.append(Barrier(session_id=sid, wake_id=wake_id))
    d.prompt(sid, "what was the word?")
    d.wait_event(sid, lambda e: len(d.message_users(sid)) == 2, what="second answer")
    requests = [e["data"] for e in d.events(sid) if e["type"] == "model_request"]
    # user, the reasoning item (gpt-5-mini reasons at its default effort), the call and its result replayed
    assert requests[-1]["message_count"] == requests[0]["message_count"] + 4
    assert lifecycle(d, sid)[-1]["fence"] == 2


def test_idle_session_goes_dormant_and_compaction_result_applies_at_wake(rt: Stack, d: Driver) -> None:
    sid = "idle1"
    wake_id = d.wake(sid)
    d.append(Barrier(session_id=sid, wake_id=wake_id))
    todo = [{"id": "a", "content": "Write the brief", "status": "in_progress"}]
    d.prompt(sid, script({"tool_calls": [call("skill", name="gml-editing")]},
                         {"tool_calls": [call("todo", items=todo)]},
                         {"tool_calls": [call("write", path="notes.md", content="word " * 400)]}, done("first")))
    d.wait_event(sid, lambda e: e["type"] == "message_user", what="first run")
    d.prompt(sid, "second turn")
    d.wait_event(sid, lambda e: len(d.message_users(sid)) == 2, what="second run")
    d.wait_event(sid, lambda e: e["type"] == "status" and e["data"]["status"] == "dormant", timeout=IDLE_S + 10,
                 what="idle → dormant")
    assert lifecycle(d, sid)[-1]["reason"] == "idle"
    # The compaction result lands while dormant: it waits in the inbox for the next holder.
    entries = parse_entries(transcript(rt.data_dir, sid))
    req = make_request(sid, entries, keep_recent_tokens=20)
    assert req is not None
    ready = CompactionReady(session_id=sid, request_id=req.request_id, summary="## Goal\nEdit the deck.",
                            first_kept_entry_id=req.first_kept_entry_id, upto_entry_id=req.upto_entry_id,
                            tokens_before=req.tokens_before, details={"readFiles": [], "modifiedFiles": ["notes.md"]})
    d.append(ready)
    d.append(ready.model_copy(update={"id": "dup-entry"}))  # a duplicate delivery
    d.append(ready.model_copy(update={"id": "stale-entry", "request_id": "cr_stale", "upto_entry_id": "gone"}))
    wake_id = d.wake(sid)
    d.append(Barrier(session_id=sid, wake_id=wake_id))
    d.wait_event(sid, lambda e: e["type"] == "compaction" and e["data"]["phase"] == "stale", what="stale discarded")
    live = [e["data"] for e in d.events(sid) if e["type"] == "status" and e["data"]["status"] == "live"
            and "viewableFiles" in e["data"]]
    assert live[-1]["viewableFiles"] == ["notes.md"]  # the projection rebuilt from the disk at wake
    after = transcript(rt.data_dir, sid)
    k = kinds(after)
    assert k.count("compaction") == 1
    at = k.index("compaction")
    assert k[at + 1 : at + 4] == ["gamma.todo_anchor", "gamma.active_skill", "gamma.active_skill"]
    anchors = [e for e in after[at + 1 : at + 4]]
    assert "Write the brief" in anchors[0]["content"]
    assert {a["details"].get("skill") for a in anchors[1:]} == {"gml-editing", "gml-authoring"}
    assert int(d.r.xpending(keys.inbox(sid), keys.RUNTIME_GROUP)["pending"]) == 0
    # The reloaded context starts with the summary: the next request is smaller than before.
    before_tokens = [e["data"]["prompt_tokens"] for e in d.events(sid) if e["type"] == "model_request"][-1]
    d.prompt(sid, "third turn")
    d.wait_event(sid, lambda e: len(d.message_users(sid)) == 3, what="third run")
    last = [e["data"] for e in d.events(sid) if e["type"] == "model_request"][-1]
    assert last["prompt_tokens"] < before_tokens


def test_compact_command_publishes_one_request(rt: Stack, d: Driver) -> None:
    sid = "compact1"
    wake_id = d.wake(sid)
    d.append(Barrier(session_id=sid, wake_id=wake_id))
    d.prompt(sid, script({"tool_calls": [call("write", path="a.md", content="text " * 300)]}, done()))
    d.wait_event(sid, lambda e: e["type"] == "message_user", what="run")
    first, second = Compact(session_id=sid, instructions="focus on files"), Compact(session_id=sid)
    d.append(first)
    d.append(second)
    rid = d.reply(sid, first.request_id)["body"]["request_id"]
    assert d.reply(sid, second.request_id)["body"]["request_id"] == rid  # at most one in flight
    requests = [p for p in stream_payloads(d.r, keys.COMPACTION_REQUESTS) if p["session_id"] == sid]
    assert len(requests) == 1 and requests[0]["request_id"] == rid
    assert requests[0]["custom_instructions"] == "focus on files"


def test_subagent_result_arrives_as_background_result(rt: Stack, d: Driver) -> None:
    sid = "sub1"
    wake_id = d.wake(sid)
    d.append(Barrier(session_id=sid, wake_id=wake_id))
    todo = [{"id": "a", "content": "Research tides", "status": "in_progress"}]
    d.prompt(sid, script({"tool_calls": [call("todo", items=todo), call("subagent", task="find tide tables")]},
                         done("waiting for research")))
    # The prompt is already answered when the result lands: the agent takes it in and says so (the
    # scripted model acknowledges late injections in plain text instead of answering the prompt again).
    d.wait_event(sid, lambda e: any("background_result" in text for text in _assistant_texts(rt, sid)),
                 what="the agent's reaction to the background result")
    entries = transcript(rt.data_dir, sid)
    result = next(e for e in entries if e["type"] == "custom_message")
    assert result["customType"] == "gamma.background_result" and "find tide tables" in result["content"]
    # Answered once; the plain-text acknowledgement reaches the user as an implicit message (README "Models").
    assert [m["message"] for m in d.message_users(sid) if not m.get("implicit")] == ["waiting for research"]
    # The runtime's own metrics saw it: model requests with their tokens, the injection, the lease.
    text = httpx.get(rt.url("runtime") + "/metrics").text
    assert _metric(text, 'gamma_injections_delivered_total{kind="background_result",source="system"}') >= 1
    assert _metric(text, "gamma_model_request_prompt_tokens_count") >= 2
    assert _metric(text, "gamma_active_leases") >= 1


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


def _assistant_texts(rt: Stack, sid: str) -> list[str]:
    return [part.get("text", "") for e in transcript(rt.data_dir, sid)
            if e["type"] == "message" and e["message"]["role"] == "assistant"
            for part in e["message"]["content"] if part.get("type") == "text"]
