"""Rewind, edit_of and fork against the real services (docs/architecture.md "Snapshots, rewind and fork").

Each session runs two scripted turns whose `bash` calls (in the real sandbox) change, create and remove
workspace files; the rewinds must put back what bash did, which no edit-tool tracking would see.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis

from shared.redis import keys
from tests.support.polling import wait_sync
from tests.support.stack import OTHER_TOKEN, Stack

pytestmark = pytest.mark.timeout(300)
BOB = {"Authorization": f"Bearer {OTHER_TOKEN}"}
TODO_1 = [{"id": "t1", "content": "first plan", "status": "in_progress"}]
TODO_2 = [{"id": "t1", "content": "first plan", "status": "complete"},
          {"id": "t2", "content": "second plan", "status": "in_progress"}]
RUN_1 = "mkdir -p src && printf v1 > src/a.txt && printf keep > b.txt"
RUN_2 = "printf v2 > src/a.txt && printf new > src/new.txt && rm b.txt && mkdir -p made/deep && printf x > made/deep/f"


def script(*steps: dict[str, Any], mark: str = "") -> str:
    """A scripted prompt; `mark` (a word) goes into its first bash command, to find its entry again."""
    if mark:
        first = steps[0]["tool_calls"][0]["arguments"]
        first["command"] = f": {mark}; " + first["command"]
    return "script:" + json.dumps(list(steps))


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command, "timeout": 120}}]}


def todo(items: list[dict[str, str]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": "todo", "arguments": {"items": items}}]}


@pytest.fixture(scope="module")
def bob(module_stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=module_stack.url(), headers=BOB, timeout=30) as client:
        yield client


def idle(api: httpx.Client, sid: str) -> None:
    wait_sync(lambda: not api.get(f"/sessions/{sid}").json()["running"], timeout=60, interval=0.2,
              what="the run's end")


def send(api: httpx.Client, sid: str, message: str, **extra: Any) -> None:
    before = len(user_entries(api, sid, tree=True))
    resp = api.post(f"/sessions/{sid}/messages", json={"message": message, **extra})
    assert resp.status_code == 202, resp.text
    wait_sync(lambda: len(user_entries(api, sid, tree=True)) > before and last_is_reply(api, sid), timeout=90,
              interval=0.2, what="the run's reply")
    idle(api, sid)


def last_is_reply(api: httpx.Client, sid: str) -> bool:
    entries = transcript(api, sid)
    return bool(entries) and entries[-1].get("type") == "message" and entries[-1]["message"]["role"] == "toolResult" \
        and entries[-1]["message"]["toolName"] == "message_user"


def transcript(api: httpx.Client, sid: str, tree: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = "0"
    while True:
        page = api.get(f"/sessions/{sid}/transcript", params={"cursor": cursor, "tree": int(tree)}).json()
        out += page["entries"]
        if not page["has_more"]:
            return out
        cursor = page["next_cursor"]


def user_entries(api: httpx.Client, sid: str, tree: bool = False) -> list[dict[str, Any]]:
    return [e for e in transcript(api, sid, tree) if e.get("type") == "message" and e["message"]["role"] == "user"]


def user_entry(api: httpx.Client, sid: str, fragment: str) -> dict[str, Any]:
    return next(e for e in user_entries(api, sid, tree=True) if fragment in json.dumps(e["message"]["content"]))


def file(api: httpx.Client, sid: str, path: str) -> str | None:
    resp = api.get(f"/sessions/{sid}/workspace/files/{path}")
    return resp.text if resp.status_code == 200 else None


def parent_turn(api: httpx.Client, sid: str, entry: dict[str, Any]) -> str:
    """The parent of a user message, past the trusted messages recorded just before it in its turn
    (the todo anchor, an artifact_update): the point the prompt was sent at."""
    by_id = {e["id"]: e for e in transcript(api, sid, tree=True)}
    parent = entry["parentId"]
    while by_id[parent]["type"] == "custom_message":
        parent = by_id[parent]["parentId"]
    return str(parent)


def two_turns(api: httpx.Client) -> tuple[str, dict[str, Any]]:
    """A session after two bash turns; returns it and the second turn's user entry."""
    sid = str(api.post("/sessions").json()["id"])
    send(api, sid, script(bash(RUN_1), todo(TODO_1), mark="turn-one"))
    put = api.put(f"/sessions/{sid}/documents/deck1", json={"title": "Otters", "cards": [{"id": "c1", "title": "Intro"}]})
    assert put.status_code == 200, put.text
    send(api, sid, script(bash(RUN_2), todo(TODO_2), mark="turn-two"))
    assert file(api, sid, "src/a.txt") == "v2" and file(api, sid, "src/new.txt") == "new"
    assert api.put(f"/sessions/{sid}/documents/deck1", json={"title": "Seals", "cards": []}).status_code == 200
    # A task is active (t2): the edit's artifact_update starts a turn of its own once the digest sends
    # it. Settled here, so what a test reads next does not change under it.
    wait_sync(lambda: deck_update_recorded(api, sid, 2) and not api.get(f"/sessions/{sid}").json()["running"],
              timeout=60, interval=0.1, what="the deck edit's update recorded and its turn ended")
    return sid, user_entry(api, sid, "turn-two")


def deck_update_recorded(api: httpx.Client, sid: str, revision: int) -> bool:
    return any(e.get("customType") == "gamma.artifact_update" and (e.get("details") or {}).get("toRevision") == revision
               for e in transcript(api, sid, tree=True))


def assert_state_of_turn_two_prompt(api: httpx.Client, sid: str) -> None:
    assert file(api, sid, "src/a.txt") == "v1"
    assert file(api, sid, "b.txt") == "keep"
    assert file(api, sid, "src/new.txt") is None and file(api, sid, "made/deep/f") is None
    listing = api.get(f"/sessions/{sid}/workspace/files/").json()["entries"]
    assert "made" not in {e["name"] for e in listing}
    assert api.get(f"/sessions/{sid}/documents/deck1").json()["title"] == "Otters"
    items = api.get(f"/sessions/{sid}/preview").json()["todo"]["items"]
    assert [(i["id"], i["status"]) for i in items] == [("t1", "in_progress")]


def assert_branch_moved(api: httpx.Client, sid: str, target: dict[str, Any]) -> None:
    active = transcript(api, sid)
    nodes = [e for e in active if e["type"] != "leaf"]
    assert nodes[-1]["id"] == target["id"], "the active branch ends at the rewind point"
    assert active[-1]["type"] == "leaf" and active[-1]["targetId"] == target["id"]
    whole = transcript(api, sid, tree=True)
    assert len(whole) > len(active), "the abandoned run's entries stay in the tree"
    abandoned = [e for e in whole if e.get("parentId") == target["id"]]
    assert abandoned and all(e["id"] not in {a["id"] for a in active} for e in abandoned)


def test_a_live_rewind_restores_what_bash_changed(api: httpx.Client, r: redis.Redis) -> None:
    sid, turn_two = two_turns(api)
    resp = api.post(f"/sessions/{sid}/rewind", json={"entry_id": turn_two["id"]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["entry_id"] == turn_two["id"] and resp.json()["changed"] >= 5
    assert_state_of_turn_two_prompt(api, sid)
    assert_branch_moved(api, sid, turn_two)
    send(api, sid, "after the rewind")
    nxt = user_entry(api, sid, "after the rewind")
    assert parent_turn(api, sid, nxt) == turn_two["id"], "the next prompt hangs under the rewind point"
    view = api.get(f"/sessions/{sid}/transcript", params={"tree": 1}).json()
    assert len(view["branch_points"][turn_two["id"]]) == 2
    assert r.exists(keys.lease(sid)), "live all along"


def test_a_dormant_rewind_does_not_wake_the_session(api: httpx.Client, r: redis.Redis) -> None:
    sid, turn_two = two_turns(api)
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    resp = api.post(f"/sessions/{sid}/rewind", json={"entry_id": turn_two["id"]})
    assert resp.status_code == 200, resp.text
    assert api.get(f"/sessions/{sid}").json()["status"] == "dormant" and not r.exists(keys.lease(sid))
    assert_state_of_turn_two_prompt(api, sid)
    assert_branch_moved(api, sid, turn_two)
    send(api, sid, "after the dormant rewind")  # wakes: the runtime reads the moved leaf
    assert parent_turn(api, sid, user_entry(api, sid, "after the dormant rewind")) == turn_two["id"]
    assert file(api, sid, "src/a.txt") == "v1"


def test_a_rewind_during_a_run_aborts_it_first(api: httpx.Client) -> None:
    sid = str(api.post("/sessions").json()["id"])
    send(api, sid, script(bash(RUN_1), mark="turn-one"))
    resp = api.post(f"/sessions/{sid}/messages", json={"message": script(bash("printf v9 > src/a.txt; sleep 29; printf late > late.txt"), mark="slow")})
    assert resp.status_code == 202
    wait_sync(lambda: file(api, sid, "src/a.txt") == "v9", timeout=60, interval=0.1, what="the slow bash started")
    slow = user_entry(api, sid, " slow")
    resp = api.post(f"/sessions/{sid}/rewind", json={"entry_id": slow["id"]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["aborted_run_id"], "the run was aborted first"
    assert not api.get(f"/sessions/{sid}").json()["running"]
    assert file(api, sid, "src/a.txt") == "v1" and file(api, sid, "late.txt") is None


def test_fork_at_an_entry_copies_its_state_and_leaves_the_source(api: httpx.Client, bob: httpx.Client) -> None:
    sid, turn_two = two_turns(api)
    before = transcript(api, sid, tree=True)
    resp = api.post(f"/sessions/{sid}/fork", json={"entry_id": turn_two["id"]})
    assert resp.status_code == 201, resp.text
    forked = resp.json()
    new = forked["id"]
    assert new != sid and forked["status"] == "dormant" and forked["forked_from"]["entry_id"] == turn_two["id"]
    assert_state_of_turn_two_prompt(api, new)
    branch = transcript(api, new)
    assert branch[-1]["id"] == turn_two["id"] and all(e["id"] in {b["id"] for b in before} for e in branch)
    assert transcript(api, sid, tree=True) == before and file(api, sid, "src/a.txt") == "v2", "source untouched"
    assert new in {s["id"] for s in api.get("/sessions").json()["sessions"]}
    assert bob.post(f"/sessions/{sid}/fork", json={}).status_code == 404
    assert bob.get(f"/sessions/{new}").status_code == 404
    send(api, new, "first message of the fork")
    assert parent_turn(api, new, user_entry(api, new, "first message of the fork")) == turn_two["id"]


def test_edit_of_starts_a_branch_and_the_tree_shows_both(api: httpx.Client) -> None:
    sid, turn_two = two_turns(api)
    send(api, sid, script(bash(RUN_2), mark="edited-two"), edit_of=turn_two["id"])
    edited = user_entry(api, sid, "edited-two")
    assert parent_turn(api, sid, edited) == parent_turn(api, sid, turn_two), "a sibling of the edited message"
    view = api.get(f"/sessions/{sid}/transcript", params={"tree": 1}).json()
    children = view["branch_points"][turn_two["parentId"]]
    assert len(children) == 2 and children[0] == turn_two["id"], "the edited message's parent is the branch point"
    by_id = {e["id"]: e for e in transcript(api, sid, tree=True)}
    chain, node = [], edited["id"]
    while node is not None:
        chain.append(node)
        node = by_id[node].get("parentId")
    assert children[1] in chain, "the new branch leads to the edited text"
    assert turn_two["id"] not in {e["id"] for e in transcript(api, sid)}
    assert api.post(f"/sessions/{sid}/messages", json={"message": "x", "edit_of": "nope"}).status_code == 422


def test_bad_rewinds_are_refused_and_change_nothing(api: httpx.Client, bob: httpx.Client) -> None:
    sid = str(api.post("/sessions").json()["id"])
    send(api, sid, script(bash(RUN_1), mark="turn-one"))
    whole = transcript(api, sid, tree=True)
    assert api.post(f"/sessions/{sid}/rewind", json={"entry_id": "../etc"}).status_code == 422
    assert api.post(f"/sessions/{sid}/rewind", json={"entry_id": "unknown1"}).status_code == 404
    header = whole[0]["id"]
    refused = api.post(f"/sessions/{sid}/rewind", json={"entry_id": header})
    assert refused.status_code == 409 and "oldest" in refused.text
    assert bob.post(f"/sessions/{sid}/rewind", json={"entry_id": header}).status_code == 404
    assert transcript(api, sid, tree=True) == whole and file(api, sid, "src/a.txt") == "v1"


def test_a_batch_that_changes_one_of_a_thousand_files_stores_about_one_file(api: httpx.Client,
                                                                           module_stack: Stack) -> None:
    sid = str(api.post("/sessions").json()["id"])
    send(api, sid, script(bash("mkdir -p many && for i in $(seq 1000); do echo $i > many/f$i.txt; done"), mark="fill"))
    objects = module_stack.data_dir / "sessions" / sid / ".snapshots" / "objects"

    def stored() -> int:
        return sum(1 for p in objects.rglob("*") if p.is_file())

    before = stored()
    assert before >= 1000
    batches = [bash(f"echo changed{i} > many/f{i}.txt") for i in range(1, 6)]
    send(api, sid, script(*batches, mark="five"))
    assert 5 <= stored() - before <= 7, "about one stored file per batch"
    resp = api.post(f"/sessions/{sid}/rewind", json={"entry_id": user_entry(api, sid, "five")["id"]})
    assert resp.status_code == 200 and resp.json()["changed"] == 5
    assert file(api, sid, "many/f3.txt") == "3\n"


def read(path: bytes) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_rewind_and_fork_keep_names_that_are_not_utf8(api: httpx.Client, module_stack: Stack) -> None:
    """docs/architecture.md "Workspace names": before, a snapshot of a Latin-1 name could not be written
    (surrogates are no JSON) and a dormant rewind answered 500 after restoring files, leaving its intent."""
    sid = str(api.post("/sessions").json()["id"])
    send(api, sid, script(bash("printf one > $'caf\\xe9.txt'"), mark="latin-one"))
    send(api, sid, script(bash("printf two > $'caf\\xe9.txt' && printf x > $'d\\xe9j\\xe0'"), mark="latin-two"))
    root = os.fsencode(module_stack.data_dir / "sessions" / sid)
    assert read(root + b"/workspace/caf\xe9.txt") == b"two"
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    resp = api.post(f"/sessions/{sid}/rewind", json={"entry_id": user_entry(api, sid, "latin-two")["id"]})
    assert resp.status_code == 200 and resp.json()["changed"] >= 2, resp.text
    assert read(root + b"/workspace/caf\xe9.txt") == b"one"
    assert not os.path.exists(root + b"/workspace/d\xe9j\xe0")
    assert not os.path.exists(root + b"/.snapshots/rewind.json"), "the intent is done"
    assert file(api, sid, quote("caf\\xE9.txt")) == "one"
    forked = api.post(f"/sessions/{sid}/fork", json={})
    assert forked.status_code == 201, forked.text
    copy = os.fsencode(module_stack.data_dir / "sessions" / forked.json()["id"] / "workspace")
    assert os.listdir(copy) == [b"caf\xe9.txt"] and read(copy + b"/caf\xe9.txt") == b"one"
    send(api, sid, "after the rewind of a Latin-1 name")  # wakes


def test_a_rewind_past_five_thousand_entries_restores_them(api: httpx.Client) -> None:
    """Before: snapshots stopped at 2 x GAMMA_WORKSPACE_MAX_FILES + 1000 (5,000) entries against a
    10,000-entry quota, and a rewind answered `changed: 0` with nothing restored. (Directories: the
    file quota does not count them. They are made, never removed here: an rmdir costs milliseconds on a
    disk mounted with `discard`.)"""
    sid = str(api.post("/sessions").json()["id"])
    send(api, sid, script(bash("printf one > a.txt && mkdir many && cd many && mkdir $(seq -f d%g 6000)"),
                          mark="six-thousand"))
    send(api, sid, script(bash("printf two > a.txt"), mark="then-two"))
    assert file(api, sid, "a.txt") == "two"
    resp = api.post(f"/sessions/{sid}/rewind", json={"entry_id": user_entry(api, sid, "then-two")["id"]})
    assert resp.status_code == 200 and resp.json()["changed"] >= 1, resp.text
    assert file(api, sid, "a.txt") == "one"
    assert len(api.get(f"/sessions/{sid}/workspace/files/many/").json()["entries"]) == 6000


def test_a_fork_never_lays_out_a_setuid_file(api: httpx.Client, module_stack: Stack) -> None:
    """Before: the mode was restored whole, so a fork (written by the service: root under `make run`) of a
    file a command made setuid gave a root-owned setuid program."""
    sid = str(api.post("/sessions").json()["id"])
    send(api, sid, script(bash("printf '#!/bin/sh\\nid\\n' > s && chmod 6755 s && mkdir t && chmod 1777 t "
                               "&& stat -c %a s t"), mark="suid"))
    forked = api.post(f"/sessions/{sid}/fork", json={})
    assert forked.status_code == 201, forked.text
    ws = module_stack.data_dir / "sessions" / forked.json()["id"] / "workspace"
    assert (ws / "s").stat().st_mode & 0o7777 == 0o755
    assert (ws / "t").stat().st_mode & 0o7000 == 0


def test_the_first_message_can_be_edited(api: httpx.Client) -> None:
    """Before: `edit_of` the first message was a 409 (no snapshot is keyed to its parent, the session's
    start). Its "prompt" snapshot holds the state it was sent in: an empty workspace here."""
    sid = str(api.post("/sessions").json()["id"])
    send(api, sid, script(bash("printf v1 > f.txt"), mark="first-one"))
    first = user_entry(api, sid, "first-one")
    assert file(api, sid, "f.txt") == "v1"
    send(api, sid, script(bash("printf edited > g.txt"), mark="first-edited"), edit_of=first["id"])
    assert file(api, sid, "f.txt") is None and file(api, sid, "g.txt") == "edited"
    edited = user_entry(api, sid, "first-edited")
    assert first["id"] not in {e["id"] for e in transcript(api, sid)} and edited["id"] in {e["id"] for e in transcript(api, sid)}


def test_a_rewind_to_one_result_of_a_parallel_batch_answers_the_others(api: httpx.Client) -> None:
    """Before: the batch's other calls were left without output on the new branch, a history the real
    APIs refuse (every later turn failed)."""
    sid = str(api.post("/sessions").json()["id"])
    batch = {"tool_calls": [{"name": "bash", "arguments": {"command": f": parallel; printf {i} > p{i}.txt"}}
                            for i in range(3)]}
    send(api, sid, script(batch))
    entries = transcript(api, sid)
    call = next(e for e in entries if e["type"] == "message" and e["message"]["role"] == "assistant"
                and len(e["message"].get("content", [])) >= 3 and "parallel" in json.dumps(e["message"]))
    ids = [c["id"] for c in call["message"]["content"] if c.get("type") == "toolCall"]
    results = [e for e in entries if e["type"] == "message" and e["message"]["role"] == "toolResult"
               and e["message"]["toolCallId"] in ids]
    assert len(ids) == 3 and len(results) == 3
    resp = api.post(f"/sessions/{sid}/rewind", json={"entry_id": results[0]["id"]})
    assert resp.status_code == 200, resp.text
    active = transcript(api, sid)
    answered = [e["message"] for e in active if e["type"] == "message" and e["message"]["role"] == "toolResult"
                and e["message"]["toolCallId"] in ids]
    assert sorted(m["toolCallId"] for m in answered) == sorted(ids), "every call of the batch has its result"
    not_run = [m for m in answered if m["toolCallId"] != results[0]["message"]["toolCallId"]]
    assert all(m["isError"] and "Not run" in json.dumps(m["content"]) for m in not_run)
    send(api, sid, "after the batch rewind")
