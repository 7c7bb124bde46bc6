"""Causal order of live writes before prompts (docs/architecture.md "Causal order"), on the real stack.

The digest debounce is long here (1.5 s): without the causal wait every prompt sent right after its
write would overtake the write's `artifact_update` (the prompt goes to the inbox at once, the update
only after the debounce). Each check reads the transcript: the update of every write acknowledged
before a prompt is recorded before that prompt's user message.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(420)
USER = {"authorization": f"Bearer {API_TOKEN}"}
# Write-then-prompt rounds per write kind. 12 keep every kind, the three rounds right after a wake and
# each kind racing the other three; a race hunt sets CAUSAL_ROUNDS=50 or more (50 was the default, 4x
# the time for the same paths).
ROUNDS = int(os.environ.get("CAUSAL_ROUNDS", "12"))
WAKES = 3  # of which, right after a wake (suspend, a waking prompt, then the write and the prompt)
DECK = {"title": "Q3", "theme": "dark", "cards": [{"id": f"card_{i}", "title": f"T{i}", "body": "b"} for i in range(1, 4)]}


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("causal"),
              env_overrides={"GAMMA_DIGEST_DEBOUNCE_MS": "1500",
                             "GAMMA_CAUSAL_WAIT_MS": os.environ.get("CAUSAL_TEST_WAIT_MS", "3000")})
    try:
        s.start()
        yield s
    finally:
        s.stop()


class Tail:
    """The session's transcript, read incrementally (GET /transcript from the last cursor)."""

    def __init__(self, http: httpx.Client, sid: str) -> None:
        self.http, self.sid, self.cursor = http, sid, "0"
        self.items: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        while True:
            r = self.http.get(f"/sessions/{self.sid}/transcript", params={"cursor": self.cursor})
            assert r.status_code == 200, r.text
            body = r.json()
            self.items.extend(body["entries"])
            self.cursor = body["next_cursor"]
            if not body["has_more"]:
                return self.items

    def user_at(self, text: str) -> int | None:
        return next((i for i, e in enumerate(self.items) if e.get("type") == "message"
                     and e["message"].get("role") == "user" and e["message"].get("content") == text), None)

    def answered(self, text: str, timeout_s: float = 30) -> int:
        """Index of `text`'s user message once the run it started gave its blocking answer."""
        def answer() -> tuple[int] | None:  # a tuple: index 0 is an answer too
            self.poll()
            at = self.user_at(text)
            if at is not None and any(e.get("type") == "message" and e["message"].get("role") == "toolResult"
                                      and (e["message"].get("details") or {}).get("blockOnUser")
                                      for e in self.items[at:]):
                return (at,)
            return None
        return wait_sync(answer, timeout=timeout_s, interval=0.02, what=f"an answer to {text!r}")[0]


def updates(items: list[dict[str, Any]], ref: str) -> list[dict[str, Any]]:
    return [e for e in items if e.get("type") == "custom_message" and e.get("customType") == "gamma.artifact_update"
            and (e.get("details") or {}).get("ref") == ref]


def covers(items: list[dict[str, Any]], ref: str, revision: int) -> bool:
    return any(int((e.get("details") or {}).get("toRevision") or 0) >= revision for e in updates(items, ref))


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url(), headers=USER, timeout=30) as client:
        yield client


def new_session(http: httpx.Client) -> tuple[str, Tail]:
    r = http.post("/sessions", json={})
    assert r.status_code == 201, r.text
    sid = str(r.json()["id"])
    tail = Tail(http, sid)
    prompt(http, sid, "hello")
    tail.answered("hello")
    return sid, tail


def prompt(http: httpx.Client, sid: str, text: str, **extra: Any) -> None:
    r = http.post(f"/sessions/{sid}/messages", json={"message": text, **extra})
    assert r.status_code == 202, r.text


def put_file(http: httpx.Client, sid: str, path: str, content: str) -> tuple[str, int]:
    r = http.put(f"/sessions/{sid}/workspace/files/{path}", content=content.encode())
    assert r.status_code == 200, r.text
    return f"file:{path}", int(r.json()["revision"])


def put_deck(http: httpx.Client, sid: str, doc: str, title: str) -> tuple[str, int]:
    r = http.put(f"/sessions/{sid}/documents/{doc}", json={**DECK, "title": title})
    assert r.status_code == 200, r.text
    return f"gamma:file:{doc}", int(r.json()["revision"])


def patch_deck(http: httpx.Client, sid: str, doc: str, title: str) -> tuple[str, int]:
    r = http.patch(f"/sessions/{sid}/documents/{doc}", json={"cards": [{"id": "card_2", "title": title}]})
    assert r.status_code == 200, r.text
    return f"gamma:file:{doc}", int(r.json()["revision"])


def wake(http: httpx.Client, sid: str, tail: Tail, text: str) -> None:
    r = http.post(f"/sessions/{sid}/suspend")
    assert r.status_code == 200, r.text
    prompt(http, sid, text)
    tail.answered(text)


Write = Callable[[httpx.Client, str, int], tuple[str, int]]
KINDS: dict[str, Write] = {
    "new file": lambda h, sid, i: put_file(h, sid, f"new/n{i}.txt", f"new file {i}\n"),
    "overwrite": lambda h, sid, i: put_file(h, sid, "brief.xml", f"<brief><v>{i}</v></brief>\n"),
    "new deck": lambda h, sid, i: put_deck(h, sid, f"deck{i}", f"Deck {i}"),
    "deck edit": lambda h, sid, i: patch_deck(h, sid, "d1", f"Edited {i}"),
}


def rounds_of(stack: Stack, kind: str) -> float:
    """ROUNDS write-then-prompt rounds of one kind in a session of its own; returns the seconds taken."""
    started = time.time()
    with httpx.Client(base_url=stack.url(), headers=USER, timeout=30) as http:
        sid, tail = new_session(http)
        put_file(http, sid, "brief.xml", "<brief/>\n")
        put_deck(http, sid, "d1", "Deck one")
        wake_rounds = set(range(0, ROUNDS, max(ROUNDS // WAKES, 1))[:WAKES])
        for i in range(ROUNDS):
            if i in wake_rounds:
                wake(http, sid, tail, f"wake {kind} {i}")
            before = len(tail.poll())
            ref, revision = KINDS[kind](http, sid, i)
            text = f"{kind}: look at it ({i})"
            prompt(http, sid, text)  # at once: no sleep between the acknowledged write and the prompt
            at = tail.answered(text)
            assert covers(tail.items[before:at], ref, revision), (
                f"{kind}, round {i}: no artifact_update for {ref}@{revision} before the prompt: "
                f"{json.dumps(tail.items[before:at + 1])[-3000:]}")
    return time.time() - started


def test_write_then_prompt_at_once_update_precedes_the_prompt_every_time(stack: Stack) -> None:
    """Every write kind, ROUNDS times each, live and right after a wake; the kinds run side by side,
    each in its own session."""
    with ThreadPoolExecutor(len(KINDS)) as pool:
        took = dict(zip(KINDS, pool.map(lambda kind: rounds_of(stack, kind), KINDS), strict=True))
    print("seconds per kind:", {k: round(v, 1) for k, v in took.items()})


def test_write_while_a_tool_runs_arrives_before_the_next_model_call(http: httpx.Client) -> None:
    sid, tail = new_session(http)
    text = "script:" + json.dumps([
        {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 1.2"}}]},
        {"tool_calls": [{"name": "message_user", "arguments": {"message": "done", "blockOnUser": True}}]},
    ])
    prompt(http, sid, text)
    wait_sync(lambda: any(e.get("type") == "message" and e["message"].get("role") == "assistant"
                          for e in tail.poll()[2:]), timeout=30, interval=0.02, what="the bash call to start")
    ref, revision = put_file(http, sid, "during.txt", "written while bash sleeps\n")
    at = tail.answered(text)
    after = tail.items[at:]
    tool_result = next(i for i, e in enumerate(after) if e.get("type") == "message"
                       and e["message"].get("role") == "toolResult" and e["message"].get("toolName") == "bash")
    second_call = next(i for i, e in enumerate(after) if i > tool_result and e.get("type") == "message"
                       and e["message"].get("role") == "assistant")
    assert covers(after[:second_call], ref, revision), json.dumps(after)[-3000:]


def test_a_write_after_the_prompt_is_not_pulled_in_front(http: httpx.Client) -> None:
    sid, tail = new_session(http)
    before = len(tail.poll())
    first, rev_first = put_file(http, sid, "first.txt", "before the prompt\n")
    prompt(http, sid, "after the first write")
    later, _ = put_file(http, sid, "later.txt", "after the prompt\n")
    at = tail.answered("after the first write")
    assert covers(tail.items[before:at], first, rev_first)
    assert updates(tail.items[before:at], later) == []
    prompt(http, sid, "next")
    at_next = tail.answered("next")
    assert len(updates(tail.items[at:at_next], later)) == 1  # it came after the prompt, once


def test_digest_down_prompt_goes_on_after_the_wait_with_a_dirty_marker_then_no_duplicate(
        stack: Stack, http: httpx.Client) -> None:
    sid, tail = new_session(http)
    r = redis.Redis.from_url(stack.redis_url)
    stack.kill("digest")
    try:
        before = len(tail.poll())
        ref, revision = put_file(http, sid, "offline.txt", "written while the digest is down\n")
        started = time.time()
        prompt(http, sid, "digest is down")
        at = tail.answered("digest is down", timeout_s=60)
        waited = time.time() - started
        turn = tail.items[before:at]
        markers = [e for e in turn if e.get("type") == "custom_message"
                   and (e.get("details") or {}).get("source") == "system" and ref in str(e.get("content"))]
        assert len(markers) == 1 and "in_flight" in markers[0]["content"], json.dumps(turn)[-3000:]
        assert waited > 2.5, waited  # it waited for the digest (3 s), then went on
        assert not r.exists(keys.changes_in_flight(sid))  # given up on: the next prompt does not wait again
    finally:
        stack.start("digest")
        r.close()
    attempts = itertools.count(1)

    def prompt_until_recorded() -> bool:  # the real update follows once the digest is back: recorded once
        text = f"after the digest came back {next(attempts)}"
        prompt(http, sid, text)
        tail.answered(text)
        return covers(tail.items, ref, revision)

    wait_sync(prompt_until_recorded, timeout=30, interval=0.3, what="the real update recorded")
    time.sleep(2.0)  # past the debounce: a duplicate would be recorded by the next prompt
    prompt(http, sid, "anything else?")
    tail.answered("anything else?")
    real = [e for e in updates(tail.items, ref) if (e.get("details") or {}).get("source") == "artifact"]
    assert len(real) == 1, json.dumps(real)
    markers = [e for e in tail.items if (e.get("details") or {}).get("source") == "system" and ref in str(e.get("content"))]
    assert len(markers) == 1


def test_same_file_writes_in_a_row_are_answered_with_the_revisions_the_digest_records(
        stack: Stack, http: httpx.Client) -> None:
    """With the digest down no write is taken in before the next: answering "the digest's current
    revision + 1" gave every write the same number. The agent's write to the file counts too."""
    sid, tail = new_session(http)
    r = redis.Redis.from_url(stack.redis_url)
    ref = "file:row.txt"
    stack.kill("digest")
    try:
        agent_write = {"tool_calls": [{"name": "write", "arguments": {"path": "row.txt", "content": "agent\n"}}]}
        prompt(http, sid, "script:" + json.dumps([agent_write]))
        tail.answered("script:" + json.dumps([agent_write]))
        replies = [put_file(http, sid, "row.txt", f"user {n}\n")[1] for n in range(3)]
        assert replies == [2, 3, 4], replies  # after the agent's revision 1, one each, in order
    finally:
        stack.start("digest")
    def recorded() -> int:
        raw = r.hget(keys.revisions(sid), ref)
        return int(json.loads(raw)["current"]) if raw else 0
    wait_sync(lambda: recorded() >= replies[-1], timeout=30, what="the digest to catch up")
    assert recorded() == replies[-1]
    assert put_file(http, sid, "row.txt", "once more\n")[1] == replies[-1] + 1
    r.close()


def test_same_file_written_before_and_after_the_prompt_is_split_at_the_prompt(http: httpx.Client) -> None:
    """The digest flushes the ref only up to the revision written before the prompt; the later revision
    follows it (before the next model call), never in front of the prompt."""
    sid, tail = new_session(http)
    before = len(tail.poll())
    ref, rev_before = put_file(http, sid, "brief.xml", "<brief>before</brief>\n")
    prompt(http, sid, "split at the prompt")
    _, rev_after = put_file(http, sid, "brief.xml", "<brief>after</brief>\n")
    at = tail.answered("split at the prompt")
    in_front = [int((e.get("details") or {}).get("toRevision") or 0) for e in updates(tail.items[before:at], ref)]
    assert in_front and max(in_front) == rev_before < rev_after, json.dumps(tail.items[before:])[-3000:]
    if not covers(tail.items[at:], ref, rev_after):  # not steered into that run: it waits for the next prompt
        prompt(http, sid, "and now?")
        tail.answered("and now?")
    assert covers(tail.items[at:], ref, rev_after), json.dumps(tail.items[at:])[-3000:]


@pytest.mark.parametrize("on_busy", ["steer", "follow_up"])
def test_steer_and_follow_up_prompts_wait_for_the_writes_before_them(http: httpx.Client, on_busy: str) -> None:
    sid, tail = new_session(http)
    text = "script:" + json.dumps([
        {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 1.0"}}]},
        {"tool_calls": [{"name": "message_user", "arguments": {"message": "done", "blockOnUser": False}}]},
    ])
    prompt(http, sid, text)
    wait_sync(lambda: any(e.get("type") == "message" and e["message"].get("role") == "assistant"
                          for e in tail.poll()[2:]), timeout=30, interval=0.02, what="the bash call to start")
    before = len(tail.items)
    ref, revision = put_file(http, sid, f"{on_busy}.txt", "written during the run\n")
    busy = f"{on_busy} after the write"
    prompt(http, sid, busy, on_busy=on_busy)  # at once
    at = tail.answered(busy)
    assert covers(tail.items[before:at], ref, revision), json.dumps(tail.items[before:at + 1])[-3000:]
