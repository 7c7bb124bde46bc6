"""Completion audits (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools") against a real runtime process and real Redis (scripted model):
a blocking message_user while a workflow skill is active is checked against its checklist."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import pytest

from shared.redis import keys
from tests.integration.runtime_support import Driver, call, done, script, transcript
from tests.integration.test_runtime_protocol import go_live, run_done
from tests.support.stack import Stack

DECK_STEPS = ("brief", "brief-check", "plan", "deck-file", "validate", "create", "inspect", "lint", "todo-complete")
LOAD = {"tool_calls": [call("skill", name="deck-generation")]}


@pytest.fixture(scope="module")
def rt(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("audits"))
    stack.start("runtime")
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def d(rt: Stack) -> Driver:
    return Driver(rt.redis_url)


def audits(rt: Stack, sid: str) -> list[dict[str, object]]:
    return [e for e in transcript(rt.data_dir, sid) if e["type"] == "audit"]


def tool_results(rt: Stack, sid: str, name: str) -> list[dict[str, object]]:
    return [e["message"] for e in transcript(rt.data_dir, sid)
            if e["type"] == "message" and e["message"]["role"] == "toolResult" and e["message"]["toolName"] == name]


def audit_count(rt: Stack, outcome: str) -> float:
    with urllib.request.urlopen(rt.url("runtime") + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    line = 'gamma_completion_audits_total{outcome="' + outcome + '",workflow="deck-generation"} '
    found = re.search(re.escape(line) + r"([0-9.]+)", text)
    return float(found.group(1)) if found else 0.0


def test_missing_steps_refused_once_then_the_deviations_yield(rt: Stack, d: Driver) -> None:
    sid = "audit1"
    go_live(d, sid)
    blocked_before = audit_count(rt, "blocked")
    explained = "Done, with the deviations listed."
    declared = [{"step": s, "cause": "not done, the tool is unavailable"} for s in DECK_STEPS if s != "brief"]
    d.prompt(sid, script(LOAD, {"tool_calls": [call("write", path="brief.xml", content="<brief/>")]},
                         done("All done, the deck is ready. Deviations: " + ", ".join(DECK_STEPS)),
                         {"tool_calls": [call("message_user", message=explained, blockOnUser=True,
                                              deviations=declared)]}))
    run_done(d, sid)
    first, second = tool_results(rt, sid, "message_user")
    # the first completion never reached the user (its text naming the steps is not a declaration):
    # an error result names every missing step
    assert first["isError"] and first["content"][0]["text"].startswith("Completion audit:")
    named = re.findall(r"^- ([a-z-]+): ", first["content"][0]["text"], re.MULTILINE)
    assert named == [s for s in DECK_STEPS if s != "brief"]
    assert not second["isError"] and second["details"] == {"blockOnUser": True}
    assert [m["message"] for m in d.message_users(sid)] == [explained]
    entries = audits(rt, sid)
    assert [(e["workflow"], e["outcome"]) for e in entries] == [("deck-generation", "blocked"),
                                                                 ("deck-generation", "deviations_reported")]
    assert entries[0]["missing"] == named and entries[0]["toolCallId"] == first["toolCallId"]
    assert entries[1]["deviations"] == declared and entries[0].get("deviations") in (None, [])
    audit_events = [e["data"] for e in d.events(sid) if e["type"] == "audit"]
    assert audit_events[1]["deviations"] == declared  # the inspector shows them beside the checklist
    steps = {s["id"]: s["status"] for s in entries[0]["steps"]}
    assert steps["brief"] == "done" and steps["validate"] == "pending" and steps["research"] == "pending"
    assert [e["data"]["outcome"] for e in d.events(sid) if e["type"] == "audit"] == ["blocked", "deviations_reported"]
    assert audit_count(rt, "blocked") == blocked_before + 1


def test_a_second_completion_without_the_deviations_yields_but_is_recorded_unreported(rt: Stack, d: Driver) -> None:
    sid = "audit2"
    go_live(d, sid)
    d.prompt(sid, script(LOAD, done("Finished."), done("Finished, really.")))
    run_done(d, sid)
    assert [e["outcome"] for e in audits(rt, sid)] == ["blocked", "deviations_unreported"]
    assert [m["message"] for m in d.message_users(sid)] == ["Finished, really."]  # never refused twice


def test_a_question_with_a_blocked_task_is_not_a_completion(rt: Stack, d: Driver) -> None:
    sid = "audit3"
    go_live(d, sid)
    d.prompt(sid, script(LOAD, {"tool_calls": [call("todo", items=[
        {"id": "a", "content": "Ask who the audience is", "status": "blocked", "reason": "waiting for the user"}])]}, done("Who is the audience?")))
    run_done(d, sid)
    assert audits(rt, sid) == []
    assert [m["message"] for m in d.message_users(sid)] == ["Who is the audience?"]


def test_a_complete_workflow_passes_and_a_later_answer_is_not_held_to_it(rt: Stack, d: Driver) -> None:
    sid = "audit4"
    go_live(d, sid)
    d.prompt(sid, "Create a presentation about tide pools")
    run_done(d, sid)
    assert [e["outcome"] for e in audits(rt, sid)] == ["passed"]
    assert all(s["status"] == "done" for s in audits(rt, sid)[0]["steps"] if s["kind"] != "optional")
    d.prompt(sid, "thanks")  # the default reply: a blocking message, no workflow work since the task
    run_done(d, sid, 2)
    assert [e["outcome"] for e in audits(rt, sid)] == ["passed"]
    assert [m["block_on_user"] for m in d.message_users(sid)] == [False, True, True]


def test_after_a_finished_task_a_greeting_is_not_audited(rt: Stack, d: Driver) -> None:
    sid = "audit5"
    go_live(d, sid)
    d.prompt(sid, script({"tool_calls": [call("skill", name="gml-editing")]}, done("Deviations: none")))
    run_done(d, sid)  # refused, then the default reply yields (deviations unreported): the task is over
    d.prompt(sid, "hello there")
    run_done(d, sid, 2)
    assert [e["outcome"] for e in audits(rt, sid)] == ["blocked", "deviations_unreported"]


def test_a_preloaded_workflow_is_audited_only_once_work_on_it_starts(rt: Stack, d: Driver) -> None:
    sid = "audit6"
    d.r.hset(keys.session_row(sid), mapping={"id": sid, "variant": "deck-generation", "model": "{}"})
    go_live(d, sid)
    d.prompt(sid, "hello")  # a greeting in a deck session: the preload alone is not work on a deck
    run_done(d, sid)
    assert audits(rt, sid) == []
    d.prompt(sid, script({"tool_calls": [call("write", path="brief.xml", content="<brief/>")]}, done("Here it is.")))
    run_done(d, sid, 2)
    assert [e["outcome"] for e in audits(rt, sid)][:1] == ["blocked"]  # the preloaded contract holds


def test_declared_deviations_yield_at_once_and_end_the_contract(rt: Stack, d: Driver) -> None:
    sid = "audit7"
    go_live(d, sid)
    declared = [{"step": s, "cause": "the user asked for the outline only"} for s in DECK_STEPS]
    d.prompt(sid, script(LOAD, {"tool_calls": [call("message_user", message="Here is the outline.", blockOnUser=True,
                                                    deviations=declared)]}))
    run_done(d, sid)
    assert [e["outcome"] for e in audits(rt, sid)] == ["deviations_reported"]
    ends = [(e["name"], e["reason"]) for e in transcript(rt.data_dir, sid) if e["type"] == "skill_end"]
    assert ends == [("deck-generation", "completed"), ("gml-authoring", "with_workflow"), ("gml-cli", "with_workflow")]
    assert [e["data"]["name"] for e in d.events(sid) if e["type"] == "skill_ended"] == [n for n, _ in ends]


def test_a_malformed_deviation_list_is_an_error_result_and_nothing_is_delivered(rt: Stack, d: Driver) -> None:
    sid = "audit8"
    go_live(d, sid)
    d.prompt(sid, script({"tool_calls": [call("message_user", message="x", blockOnUser=True,
                                              deviations=[{"step": "brief"}])]}, done("ok")))
    run_done(d, sid)
    first = tool_results(rt, sid, "message_user")[0]
    assert first["isError"] and "deviations[0.cause]" in first["content"][0]["text"]
    assert [m["message"] for m in d.message_users(sid)] == ["ok"]


def test_a_completed_workflow_left_live_is_superseded_by_the_next_one(rt: Stack, d: Driver) -> None:
    sid = "audit9"
    go_live(d, sid)
    d.prompt(sid, script(LOAD, done("Finished."), done("Finished, really.")))  # yields unreported: still live
    run_done(d, sid)
    d.prompt(sid, script({"tool_calls": [call("skill", name="import")]}, {"tool_calls": [
        call("todo", items=[{"id": "a", "content": "Ask which file", "status": "blocked", "reason": "waiting for the user"}])]}, done("Which file?")))
    run_done(d, sid, 2)
    skill = tool_results(rt, sid, "skill")[-1]
    assert not skill["isError"] and skill["details"]["activated"] == ["import"]  # no conflict with the deck
    entries = transcript(rt.data_dir, sid)
    ends = [(e["name"], e["reason"], e.get("workflow")) for e in entries if e["type"] == "skill_end"]
    assert ends == [("deck-generation", "superseded", "import")]  # its references stay: import requires them
    # a new request that starts a conflicting workflow supersedes the import left mid-task (the user
    # moved on), and the import's cut-short task is audited `superseded`
    d.prompt(sid, script({"tool_calls": [call("skill", name="deck-generation")]}, done("ok")))
    run_done(d, sid, 3)
    assert not tool_results(rt, sid, "skill")[-1]["isError"]
    ends = [(e["name"], e["reason"]) for e in transcript(rt.data_dir, sid) if e["type"] == "skill_end"]
    assert ("import", "superseded") in ends, ends
    assert [(a["workflow"], a["outcome"]) for a in audits(rt, sid)][-1] == ("import", "superseded")


def test_manifest_precedence_resolves_a_conflict_within_one_request(rt: Stack, d: Driver) -> None:
    """import's manifest declares precedence over deck-generation (metadata.precedence-over): within one
    request, import supersedes a deck begun by mistake (a skill_end and a `superseded` audit naming its
    steps), the deck is refused while import is live with no question to the user, and both in one
    batch activate import only."""
    sid = "audit10"
    go_live(d, sid)
    d.prompt(sid, script(LOAD, {"tool_calls": [call("write", path="brief.xml", content="<brief/>")]},
                         {"tool_calls": [call("skill", name="import")]},
                         {"tool_calls": [call("skill", name="deck-generation")]}, done("Importing.")))
    run_done(d, sid)
    _, switched, refused = tool_results(rt, sid, "skill")
    assert not switched["isError"] and switched["details"]["activated"] == ["import"], switched
    text = refused["content"][0]["text"]
    assert refused["isError"] and "'import' (already active) takes precedence" in text and "ask the user" not in \
        text.replace("do not ask the user", ""), text
    entries = transcript(rt.data_dir, sid)
    assert [(e["name"], e["reason"], e.get("workflow")) for e in entries if e["type"] == "skill_end"] == [
        ("deck-generation", "superseded", "import")]  # its references stay: import requires them
    cut = audits(rt, sid)[0]
    assert (cut["workflow"], cut["outcome"]) == ("deck-generation", "superseded")
    assert "brief" not in cut["missing"] and "create" in cut["missing"], cut
    assert any(e["type"] == "audit" and e["data"]["outcome"] == "superseded" for e in d.events(sid)), "no audit event"
    d.prompt(sid, script({"tool_calls": [call("skill", name="deck-generation"), call("skill", name="import")]},
                         done("Importing.")))
    run_done(d, sid, 2)
    outranked, kept = tool_results(rt, sid, "skill")[-2:]
    assert not outranked["isError"] and outranked["details"]["outrankedBy"] == "import", outranked
    assert "takes precedence" in outranked["content"][0]["text"] and not kept["isError"]
