"""Acceptance for artifact digests on the real stack (five processes, real Redis, scripted model).

One session per test file: the agent (a scripted tool sequence) writes brief.xml and a deck, then the
user edits through the proxy. A live idle session keeps an artifact_update for the next user turn, so
each step sends a prompt and reads what the runtime recorded in the transcript.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
USER = {"authorization": f"Bearer {API_TOKEN}"}
DOC = "gamma:file:d1"
BRIEF = "file:brief.xml"
BRIEF_TEXT = "<brief>\n  <audience>board</audience>\n  <structure>problem, plan, ask</structure>\n</brief>\n"
DECK = {"title": "Q3 review", "theme": "dark", "metadata": {"owner": "alice"}, "assets": [],
        "cards": [{"id": f"card_{i}", "title": f"Title {i}", "body": f"Body {i}"} for i in range(1, 7)]}


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    # "Rapid" is measured against the digest's bound and the idle merge window's cap (both max(2 s, 10
    # debounces)): five PATCH round trips on a loaded 2-core machine (a cluster, two test workers) took
    # over 2 s at times, and then the first edits are rightly an update of their own. At 500 ms the
    # bound is 5 s; the prompts still flush what is pending (services/digest/flush.py).
    return {"GAMMA_DIGEST_DEBOUNCE_MS": "500"}


def script(*steps: list[dict[str, Any]]) -> str:
    return "script:" + json.dumps([{"tool_calls": calls} for calls in steps])


def entries(stack: Stack, sid: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{stack.url()}/sessions/{sid}/transcript", headers=USER, timeout=30)
    assert r.status_code == 200, r.text
    return list(r.json()["entries"])


def user_index(items: list[dict[str, Any]], text: str) -> int | None:
    for i, e in enumerate(items):
        if e.get("type") == "message" and e["message"].get("role") == "user" and e["message"].get("content") == text:
            return i
    return None


def say(stack: Stack, sid: str, text: str, timeout_s: float = 60) -> list[dict[str, Any]]:
    r = httpx.post(f"{stack.url()}/sessions/{sid}/messages", json={"message": text}, headers=USER, timeout=30)
    assert r.status_code == 202, r.text

    def answered() -> list[dict[str, Any]] | None:
        items = entries(stack, sid)
        at = user_index(items, text)
        if at is not None and any(e.get("type") == "message" and e["message"].get("role") == "toolResult"
                                  and (e["message"].get("details") or {}).get("blockOnUser") for e in items[at:]):
            return items
        return None
    return wait_sync(answered, timeout=timeout_s, interval=0.2, what=f"an answer to {text!r}")


def artifact_updates(items: list[dict[str, Any]], ref: str | None = None) -> list[dict[str, Any]]:
    return [e for e in items if e.get("type") == "custom_message" and e.get("customType") == "gamma.artifact_update"
            and (ref is None or (e.get("details") or {}).get("ref") == ref)]


def since(items: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """Entries of the turn started by `text` and the injections placed right before it."""
    at = user_index(items, text)
    assert at is not None
    start = at
    while start > 0 and items[start - 1].get("type") == "custom_message":
        start -= 1
    return items[start:]


def patch(stack: Stack, sid: str, body: dict[str, Any]) -> None:
    r = httpx.patch(f"{stack.url()}/sessions/{sid}/documents/d1", json=body, headers=USER, timeout=30)
    assert r.status_code == 200, r.text


def manifest(stack: Stack, sid: str) -> dict[str, Any]:
    path = Path(stack.data_dir) / "sessions" / sid / "pending_artifacts.json"
    return json.loads(path.read_text())["updates"] if path.exists() else {}


@pytest.fixture(scope="module")
def session(module_stack: Stack) -> str:
    r = httpx.post(module_stack.url() + "/sessions", json={}, headers=USER, timeout=30)
    assert r.status_code == 201, r.text
    sid = str(r.json()["id"])
    text = script(
        [{"name": "write", "arguments": {"path": "brief.xml", "content": BRIEF_TEXT}},
         {"name": "show_gamma", "arguments": {"doc": "d1", "deck": DECK}}],
        [{"name": "edit", "arguments": {"path": "brief.xml", "old_text": "problem, plan, ask",
                                        "new_text": "problem, plan, numbers, ask"}}],
        [{"name": "message_user", "arguments": {"message": "Brief and deck are ready.", "blockOnUser": True}}],
    )
    say(module_stack, sid, text)
    return sid


def test_agent_writes_edits_and_show_gamma_produce_no_artifact_update(module_stack: Stack, session: str) -> None:
    time.sleep(1.0)  # well past the debounce window: anything produced would be queued by now
    items = say(module_stack, session, "anything changed on your side?")
    assert artifact_updates(items) == []


def test_five_rapid_edits_to_one_card_become_one_card_scoped_digest(module_stack: Stack, session: str) -> None:
    for i in range(1, 6):
        patch(module_stack, session, {"cards": [{"id": "card_3", "title": f"Revenue v{i}"}]})
    time.sleep(1.0)
    items = say(module_stack, session, "I edited card 3")
    [update] = artifact_updates(since(items, "I edited card 3"), DOC)
    content = update["content"]
    assert update["details"]["trusted"] is True and update["details"]["source"] == "artifact"
    assert "Changed scope: card_3." in content
    assert 'On card_3, title changed from "Title 3" to "Revenue v5".' in content
    assert "All other cards are unchanged." in content
    assert "Revenue v4" not in content


def test_two_cards_are_named_and_the_rest_unchanged(module_stack: Stack, session: str) -> None:
    patch(module_stack, session, {"cards": [{"id": "card_2", "title": "Market"}, {"id": "card_5", "body": "Ask: $2M"}]})
    time.sleep(1.0)
    items = say(module_stack, session, "I edited two cards")
    [update] = artifact_updates(since(items, "I edited two cards"), DOC)
    assert "Changed scope: card_2, card_5." in update["content"]
    assert 'Title changed from "Title 2" to "Market".' in update["content"]
    assert "All other cards are unchanged." in update["content"]


def test_theme_change_is_scoped_as_theme(module_stack: Stack, session: str) -> None:
    patch(module_stack, session, {"theme": "light"})
    time.sleep(1.0)
    items = say(module_stack, session, "I changed the theme")
    [update] = artifact_updates(since(items, "I changed the theme"), DOC)
    assert update["content"].split(">", 1)[1].strip().splitlines()[2] == "Changed scope: theme."
    assert "No card changed." in update["content"]


def test_brief_saved_while_dormant_is_one_trusted_update_before_the_woken_prompt(
    module_stack: Stack, session: str
) -> None:
    r = httpx.post(f"{module_stack.url()}/sessions/{session}/suspend", headers=USER, timeout=30)
    assert r.status_code == 200, r.text
    wait_sync(lambda: httpx.get(f"{module_stack.url()}/sessions/{session}", headers=USER, timeout=30).json()["status"]
              == "dormant", timeout=30, what="the session to go dormant")
    # The agent's edit made the structure "problem, plan, numbers, ask"; the user changes the audience.
    dormant_text = BRIEF_TEXT.replace("board", "engineering leads").replace("plan, ask", "plan, numbers, ask")
    r = httpx.put(f"{module_stack.url()}/sessions/{session}/workspace/files/brief.xml", content=dormant_text.encode(),
                  headers=USER | {"x-gamma-digest": "The user edited the audience section."}, timeout=30)
    assert r.status_code == 200, r.text
    wait_sync(lambda: BRIEF in manifest(module_stack, session), timeout=20, what="the dormant edit in the manifest")
    entry = manifest(module_stack, session)[BRIEF]
    assert "The user edited the audience section." in entry["digest"]

    r = httpx.post(f"{module_stack.url()}/sessions/{session}/messages", json={"message": "continue with the brief"},
                   headers=USER, timeout=30)
    assert r.status_code == 202
    # An edit made after the wake started: retried while the proxy refuses writes during the wake.
    newer = dormant_text.replace("problem, plan, numbers, ask", "problem, plan, ask")
    def written() -> bool:
        r = httpx.put(f"{module_stack.url()}/sessions/{session}/workspace/files/brief.xml", content=newer.encode(),
                      headers=USER, timeout=30)
        assert r.status_code in (200, 409), r.text
        return r.status_code == 200
    wait_sync(written, timeout=30, what="the write after the wake")

    def woken_answer() -> tuple[list[dict[str, Any]], int] | None:
        items = entries(module_stack, session)
        at = user_index(items, "continue with the brief")
        if at is not None and any(e.get("type") == "message" and e["message"].get("role") == "toolResult"
                                  for e in items[at:]):
            return items, at
        return None
    items, at = wait_sync(woken_answer, timeout=60, interval=0.2, what="the woken prompt's answer")
    before = [e for e in items[:at] if e.get("customType") == "gamma.artifact_update"
              and e["details"].get("ref") == BRIEF]
    dormant_ones = [e for e in before if "The user edited the audience section." in e["content"]]
    assert len(dormant_ones) == 1
    assert dormant_ones[0]["details"]["trusted"] is True and dormant_ones[0]["details"]["source"] == "artifact"
    assert len([e for e in artifact_updates(items, BRIEF) if "The user edited the audience section." in e["content"]]) == 1

    # The newer edit survives: not cleared with the consumed entry, delivered at the latest on the next turn.
    # The newer digest leaves the debounce window on its own clock, so it may miss the first turn after
    # the wake; an idle session holds it for the next user turn, which the loop provides.
    # Counted in turns, not seconds (a loaded machine makes each turn slow, not the rule wrong): the
    # debounce (GAMMA_DIGEST_DEBOUNCE_MS, 500 ms here) ends long before the last of these turns.
    delivered = False
    for attempt in range(1, 11):
        items = say(module_stack, session, f"and the structure? ({attempt})")
        brief_updates = artifact_updates(items, BRIEF)
        delivered = any("-  <structure>problem, plan, numbers, ask</structure>" in e["content"] for e in brief_updates)
        if delivered:
            break
        time.sleep(0.5)  # scenario: the next turn comes after a debounce window
    assert delivered, "the newer brief edit was never delivered"
    wait_sync(lambda: not manifest(module_stack, session), timeout=20, what="the manifest emptied")
    path = Path(module_stack.data_dir) / "sessions" / session / "workspace" / "brief.xml"
    assert path.read_text() == newer
