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
    # an import mid-task (waiting on the user, so not completed) conflicts with deck-generation
    ask(api, other, script({"tool_calls": [call("skill", name="import")]},
                           {"tool_calls": [call("todo", items=[{"id": "a", "content": "Ask which file",
                                                                "status": "blocked", "reason": "the user's file"}])]}, done("Which file?")))
    es = ask(api, other, script({"content": "Create a new presentation about owls",
                                 "tool_calls": [call("read", path="brief.xml")]}, done("importing")))
    assert activations(es) == ["import", "gml-authoring", "gml-cli"] and not custom(es, "gamma.system_guidance")
    assert rule_count(stack, "conflict") == conflict + 1 and rule_count(stack, "fired") == fired
    ask(api, other, "hello")  # no rule matches: nothing counted
    assert rule_count(stack, "fired") == fired and rule_count(stack, "followed") == followed + 1
