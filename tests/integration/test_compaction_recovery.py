"""Compaction end to end: real runtime and compaction processes on real Redis, a recording model.

The model is an OpenAI-compatible server in this process (tests/support/compaction_model.py): every
agent request the runtime sends is recorded, so the tests read exactly what the model saw after a
compaction. Summaries come from the compaction service's scripted summarizer.

"Your task state and active skills survive context compaction": one test per owner (the todo
controller, skill activation entries, the runtime's injection queues).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.runtime.model.convert import SUMMARY_PREFIX
from shared.storage.disk import read_json, session_paths
from tests.support.compaction_e2e import (
    Env,
    compact_now,
    compactions,
    running_env,
    start,
    steer,
    transcript,
    wait_phase,
    wait_runs,
)
from tests.support.compaction_model import call, conversation_of, done, reply, system_and_tools, text_of

pytestmark = pytest.mark.timeout(240)

TODO = [
    {"id": "t1", "content": "Write the brief for the tidal energy deck", "status": "complete"},
    {"id": "t2", "content": "Build the ten cards", "status": "in_progress"},
    {"id": "t3", "content": "Review every card against the checklist", "status": "pending"},
]
SKILLS = ("deck-generation", "gml-authoring", "gml-cli")  # the workflow and its required references
STEERS = [
    ("system_update", "upd-1", "<system_update>The brand colors changed to teal and sand.</system_update>"),
    ("workspace_update", "ws-1", "<workspace_update>research/tides.csv was added by an import.</workspace_update>"),
]


@pytest.fixture(scope="module")
def env(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from running_env(module_redis_url, tmp_path_factory.mktemp("compaction-e2e"))


def headings() -> dict[str, str]:
    """The title line of each skill body, to find the body in a request."""
    out = {}
    for name in SKILLS:
        body = (Path(__file__).resolve().parents[2] / "skills" / name / "SKILL.md").read_text()
        out[name] = next(line for line in body.split("---", 2)[2].splitlines() if line.startswith("# "))
    return out


# ---------------------------------------------------------------- the recovery scenario


@dataclass
class Recovery:
    sid: str
    before: dict[str, Any]  # the last request before the compaction
    after: dict[str, Any]  # the next request after it
    requests: list[dict[str, Any]]
    request_id: str


@pytest.fixture(scope="module")
def recovery(env: Env) -> Recovery:
    """An active workflow skill with its required references, a todo with one task in progress, and
    two steer injections queued while a slow tool runs; a compaction is requested meanwhile."""
    sid = "recovery1"
    env.model.script(
        reply(call("skill", name="deck-generation")),
        reply(call("todo", items=TODO)),
        reply(call("bash", command="sleep 6")),
        done("The cards are being built."),
        # deck-generation is active and its steps are not done: the completion audit refuses the
        # first blocking message; the second, naming the deviations, yields (services/runtime/skillset/audit.py)
        done("The cards are being built. Deviations: brief, validate and the rest wait for the next turn."),
    )
    start(env, sid, "Create a deck about tidal energy for the board meeting.")
    env.d.wait_event(sid, lambda e: e["type"] == "tool_execution_start" and e["data"]["toolName"] == "bash",
                     what="the slow tool")
    rid = compact_now(env, sid, instructions="the card plan")
    for kind, source_id, content in STEERS:
        env.d.append(steer(sid, kind, source_id, content))
    wait_phase(env, sid, "applied")
    wait_runs(env, sid, 1)
    requests = list(env.model.requests)
    assert len(requests) == 5, [text_of(r)[-200:] for r in requests]
    return Recovery(sid=sid, before=requests[2], after=requests[3], requests=requests, request_id=rid)


def test_next_request_after_compaction_has_summary_todo_skills_and_injection(env: Env, recovery: Recovery) -> None:
    after = text_of(recovery.after)
    assert SUMMARY_PREFIX not in text_of(recovery.before)
    assert SUMMARY_PREFIX in after
    summary = after.split(SUMMARY_PREFIX, 1)[1]
    assert "## Goal" in summary and "tidal energy" in summary.split("## Constraints", 1)[0]
    assert "Requested focus: the card plan" in summary
    assert "<todo_state" in after and "[in_progress] t2: Build the ten cards" in after
    for name, heading in headings().items():
        assert heading in after, f"{name} body missing after compaction"
    for _, _, content in STEERS:
        assert content in after
    (entry,) = compactions(env, recovery.sid)
    assert entry["requestId"] == recovery.request_id


def test_static_prefix_is_unchanged_by_compaction(env: Env, recovery: Recovery) -> None:
    assert {system_and_tools(r) for r in recovery.requests} == {system_and_tools(recovery.requests[0])}
    hashes = {e["data"]["prefix_sha256"] for e in env.d.events(recovery.sid) if e["type"] == "model_request"}
    assert len(hashes) == 1


def test_todo_state_survives_compaction(env: Env, recovery: Recovery) -> None:
    after = text_of(recovery.after)
    for item in TODO:
        assert f"[{item['status']}] {item['id']}: {item['content']}" in after
    stored = read_json(session_paths(env.stack.data_dir, recovery.sid).todo)
    assert [i["status"] for i in stored["items"]] == ["complete", "in_progress", "pending"]
    # the anchor (and the kept todo tool result, if the cut kept it) show the current revision only
    revisions = re.findall(r'<todo_state revision="(\d+)">', after)
    assert revisions and set(revisions) == {str(stored["revision"])}
    # the anchor is in the transcript right after the compaction entry: a restart replays it
    entries = transcript(env, recovery.sid)
    at = next(i for i, e in enumerate(entries) if e["type"] == "compaction")
    restored = [e["customType"] for e in entries[at + 1 : at + 5] if e["type"] == "custom_message"]
    assert restored[0] == "gamma.todo_anchor"


def test_active_skills_survive_compaction(env: Env, recovery: Recovery) -> None:
    before, after = text_of(recovery.before), text_of(recovery.after)
    for name, heading in headings().items():
        assert before.count(heading) == 1, name  # as the skill tool's result
        assert after.count(heading) == 1, name  # as the restored anchor: the tool result was summarized
    assert conversation_of(recovery.after).count("<active_skill>") == 3
    entries = transcript(env, recovery.sid)
    at = next(i for i, e in enumerate(entries) if e["type"] == "compaction")
    restored = [e for e in entries[at + 1 :] if e.get("customType") == "gamma.active_skill"]
    assert {e["details"]["skill"] for e in restored} == set(SKILLS)


def test_pending_injections_survive_compaction(env: Env, recovery: Recovery) -> None:
    after = text_of(recovery.after)
    positions = [after.index(content) for _, _, content in STEERS]
    assert positions == sorted(positions), "queued injections keep their order"
    assert all(after.count(content) == 1 for _, _, content in STEERS)
    recorded = [e for e in transcript(env, recovery.sid) if e.get("details", {}).get("sourceId") in ("upd-1", "ws-1")]
    assert len(recorded) == 2


def test_a_restart_replays_the_compacted_context(env: Env, recovery: Recovery) -> None:
    sid = recovery.sid
    env.stack.kill("runtime")
    env.stack.start("runtime")
    env.model.script(done("Still on it."))
    start(env, sid, "How far along are you?")
    wait_runs(env, sid, 2)
    (first,) = env.model.requests
    text = text_of(first)
    assert text.count(SUMMARY_PREFIX) == 1 and conversation_of(first).count("<active_skill>") == 3
    stored = read_json(session_paths(env.stack.data_dir, sid).todo)
    assert set(re.findall(r'<todo_state revision="(\d+)">', text)) == {str(stored["revision"])}
    assert len(compactions(env, sid)) == 1


def test_a_second_compaction_restores_each_owner_once(env: Env, recovery: Recovery) -> None:
    sid = recovery.sid
    runs = sum(1 for e in env.d.events(sid) if e["type"] == "agent_end")
    env.model.script(reply(call("bash", command="printf 'card %s\\n' $(seq 1 400)")), done("More cards built."))
    env.d.prompt(sid, "Build the remaining cards.")
    wait_runs(env, sid, runs + 1)
    compact_now(env, sid, instructions="the remaining cards")
    wait_phase(env, sid, "applied", n=2)
    env.model.script(done("Status given."))
    env.d.prompt(sid, "Status?")
    wait_runs(env, sid, runs + 2)
    text = text_of(env.model.requests[-1])
    first, second = compactions(env, sid)
    assert text.count(SUMMARY_PREFIX) == 1 and second["summary"] in text and first["summary"] not in text
    assert conversation_of(env.model.requests[-1]).count("<active_skill>") == 3, "the anchors of the first compaction are not carried twice"
    for heading in headings().values():
        assert text.count(heading) == 1
    stored = read_json(session_paths(env.stack.data_dir, sid).todo)
    assert set(re.findall(r'<todo_state revision="(\d+)">', text)) == {str(stored["revision"])}
    # the update keeps what the first summary said and adds what happened since
    assert "Create a deck about tidal energy for the board meeting." in first["summary"]
    assert "Create a deck about tidal energy for the board meeting." in second["summary"]
    assert "Build the ten cards" in second["summary"] and "Build the ten cards" not in first["summary"]
