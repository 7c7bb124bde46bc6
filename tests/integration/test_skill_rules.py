"""Deterministic skill rules through the five services (real Redis, scripted model): a new-deck
request whose first tool batch skips `deck-generation` gets it loaded by the harness (a trusted
system_guidance, the skill and its required skills active) and the rule's counter on the runtime's
/metrics moves; a batch that loads the skill itself, or one that loads a conflicting workflow, does
not get it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.runtime_support import call, done, script
from tests.integration.test_knowledge import ask, custom
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("skill-rules"))
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30) as c:
        yield c


def rule_count(stack: Stack, outcome: str) -> float:
    text = httpx.get(stack.url("runtime") + "/metrics").text
    m = re.search(r'^gamma_skill_rule_total\{outcome="' + outcome + r'",rule="new-deck"\} (\S+)$', text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def activations(es: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in es if e["type"] == "skill_activation"]


def test_a_skipped_required_skill_is_loaded_by_the_harness(api: httpx.Client, stack: Stack) -> None:
    fired = rule_count(stack, "fired")
    sid = api.post("/sessions").json()["id"]
    brief = "<brief><topic>owls</topic></brief>"
    es = ask(api, sid, script({"content": "Create a new presentation about owls",
                               "tool_calls": [call("write", path="brief.xml", content=brief)]}, done("started")))
    (guidance,) = custom(es, "gamma.system_guidance")
    assert guidance["details"]["rule"] == "new-deck" and guidance["details"]["trusted"] is True
    assert "deck-generation" in guidance["content"]
    assert activations(es) == ["deck-generation", "gml-authoring", "gml-cli"]
    kinds = [e.get("customType") or e.get("message", {}).get("toolName") or e["type"] for e in es]
    # after the first batch's result, before the next model call (the yield)
    assert kinds.index("gamma.system_guidance") > kinds.index("write")
    assert kinds.index("gamma.system_guidance") < kinds.index("message_user")
    assert [e["details"]["skill"] for e in custom(es, "gamma.active_skill")] == activations(es)
    assert rule_count(stack, "fired") == fired + 1


def test_a_batch_that_loads_the_skill_or_a_conflicting_one_is_left_alone(api: httpx.Client, stack: Stack) -> None:
    followed, fired, conflict = (rule_count(stack, o) for o in ("followed", "fired", "conflict"))
    sid = api.post("/sessions").json()["id"]
    es = ask(api, sid, "Create a presentation about owls")  # the scripted model loads deck-generation itself
    assert activations(es)[0] == "deck-generation" and not custom(es, "gamma.system_guidance")
    assert rule_count(stack, "followed") == followed + 1
    other = api.post("/sessions").json()["id"]
    # the prompt asks for a deck, but its first batch loads import, which conflicts: left alone (the
    # skill's name escaped in the script's JSON, so that the prompt's text does not say "import",
    # which the rule's `unless` would take as an import request)
    first = script({"content": "Create a new presentation about owls", "tool_calls": [call("skill", name="import")]},
                   {"tool_calls": [call("todo", items=[{"id": "a", "content": "Ask which file",
                                                        "status": "blocked", "reason": "the user's file"}])]},
                   done("Which file?"))
    es = ask(api, other, first.replace('"import"', '"\\u0069mport"'))
    assert activations(es) == ["import", "gml-authoring", "gml-cli"] and not custom(es, "gamma.system_guidance")
    assert rule_count(stack, "conflict") == conflict + 1 and rule_count(stack, "fired") == fired
    # a new request for a deck while that import waits: the user moved on, the import (an earlier
    # request's workflow) is superseded, so the rule fires and deck-generation becomes the contract
    es = ask(api, other, script({"content": "Create a new presentation about owls",
                                 "tool_calls": [call("read", path="brief.xml")]}, done("deck")))
    assert rule_count(stack, "fired") == fired + 1 and custom(es, "gamma.system_guidance")
    ends = [(e["name"], e["reason"]) for e in es if e["type"] == "skill_end"]
    assert ("import", "superseded") in ends, ends
    fired += 1
    ask(api, other, "hello")  # no rule matches: nothing counted
    assert rule_count(stack, "fired") == fired and rule_count(stack, "followed") == followed + 1


def test_a_deck_session_with_no_deck_work_can_import(api: httpx.Client) -> None:
    """A deck-variant session preloads deck-generation; a user who asks for an import instead is not
    refused for the whole session: the preloaded contract, of no request yet, is superseded."""
    r = api.post("/sessions", json={"variant": "deck-generation"})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    es = ask(api, sid, script({"tool_calls": [call("skill", name="import")]}, done("Importing your file.")))
    results = [e["message"] for e in es if e.get("type") == "message" and e["message"].get("toolName") == "skill"]
    assert results and not results[0]["isError"], results
    assert "import" in activations(es)
    ends = [(e["name"], e["reason"]) for e in es if e["type"] == "skill_end"]
    assert ("deck-generation", "superseded") in ends, ends
