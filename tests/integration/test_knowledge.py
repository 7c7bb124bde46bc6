"""Scoped workspace knowledge through the five services (real Redis, scripted model): the
`/knowledge` API, the `<knowledge_hints>` block at a prompt, `read_workspace_rule`, `workspace_update`
for a note changed while live (from the proxy) and while dormant (from the runtime at the next
prompt), a large body as a workspace file, and loaded notes restored after compaction."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.integration.runtime_support import call, done, script
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries, tool_results
from tests.support.stack import OTHER_TOKEN, Stack

pytestmark = pytest.mark.timeout(300)
BOB = {"Authorization": f"Bearer {OTHER_TOKEN}"}
IMAGES = {"name": "Workspace image rules", "scope": "Use for image selection or image generation in this workspace.",
          "source": "workspace", "body": "Use only photos from the brand library. Never generate faces."}
TONE = {"name": "Tone of voice", "scope": "Use when writing deck text, titles or speaker cues.",
        "body": "Plain, warm, no exclamation marks."}
LEGAL = {"name": "Legal disclaimers", "scope": "Use for financial or investment presentations.",
         "source": "workspace", "body": "Add the standard disclaimer card last."}


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_KEEP_RECENT_TOKENS": "200", "GAMMA_KNOWLEDGE_INLINE_CHARS": "1000"}


@pytest.fixture(scope="module")
def stack(module_stack: Stack) -> Stack:
    return module_stack


def custom(es: list[dict[str, Any]], custom_type: str) -> list[dict[str, Any]]:
    return [e for e in es if e["type"] == "custom_message" and e["customType"] == custom_type]


def read_script(*ids: str) -> str:
    return script({"tool_calls": [call("read_workspace_rule", knowledgeId=i) for i in ids]}, done("read"))


def test_api_crud_validation_and_ownership(api: httpx.Client, stack: Stack) -> None:
    first = api.put("/knowledge/crud-note", json=TONE)
    assert first.status_code == 200, first.text
    assert first.json()["revision"] == 1 and first.json()["id"] == "crud-note"
    second = api.put("/knowledge/crud-note", json={**TONE, "body": "Changed."}).json()
    assert second["revision"] == 2 and second["body"] == "Changed."
    listed = api.get("/knowledge").json()["notes"]
    mine = next(n for n in listed if n["id"] == "crud-note")
    assert "body" not in mine and mine["scope"] == TONE["scope"] and mine["source"] == "workspace"
    # A user cannot label their note system-authored (then quoted as author="system"): refused, nothing kept.
    claimed = api.put("/knowledge/claims-system", json={**TONE, "source": "system"})
    assert claimed.status_code == 422, claimed.text
    assert api.get("/knowledge/claims-system").status_code == 404
    assert api.get("/knowledge/crud-note").json()["body"] == "Changed."
    with httpx.Client(base_url=stack.url(), headers=BOB, timeout=30) as bob:
        assert all(n["id"] != "crud-note" for n in bob.get("/knowledge").json()["notes"])
        assert bob.get("/knowledge/crud-note").status_code == 404
        assert bob.delete("/knowledge/crud-note").status_code == 404
    assert httpx.get(stack.url() + "/knowledge").status_code == 401
    for bad_id, body in (("Bad Id!", TONE), ("ok-id", {**TONE, "source": "admin"}),
                         ("ok-id", {k: v for k, v in TONE.items() if k != "scope"}),
                         ("ok-id", {**TONE, "extra": 1}), ("ok-id", {**TONE, "name": ""})):
        resp = api.put(f"/knowledge/{bad_id}", json=body)
        assert resp.status_code in (404, 422), (bad_id, body, resp.text)
        assert "error" in resp.json()
    assert api.get("/knowledge/ok-id").status_code == 404  # nothing was stored
    assert api.get("/knowledge/crud-note").json()["revision"] == 2
    assert api.delete("/knowledge/crud-note").status_code == 204
    assert api.delete("/knowledge/crud-note").status_code == 404
    again = api.put("/knowledge/crud-note", json=TONE).json()
    assert again["revision"] == 4  # the deletion was revision 3: a re-created note never reuses one
    assert api.delete("/knowledge/crud-note").status_code == 204


def test_hints_read_update_and_compaction(api: httpx.Client) -> None:
    for note_id, body in (("note-brand-images", IMAGES), ("tone", TONE), ("legal", LEGAL)):
        assert api.put(f"/knowledge/{note_id}", json=body).status_code == 200
    sid = api.post("/sessions").json()["id"]

    es = ask(api, sid, read_script("note-brand-images"))
    (hints,) = custom(es, "gamma.knowledge_hints")
    assert hints["content"] == (
        "<knowledge_hints>\n"
        "  BLOCKING: Fetch each matching unread note before the first task action.\n"
        "  <knowledge\n"
        '    id="note-brand-images"\n'
        '    name="Workspace image rules"\n'
        '    scope="Use for image selection or image generation in this workspace."\n'
        '    source="workspace"\n'
        "  />\n"
        "</knowledge_hints>")
    assert hints["details"]["trusted"] is True and hints["details"]["injectionType"] == "knowledge_hints"
    at = es.index(hints)
    assert es[at + 1]["type"] == "message" and es[at + 1]["message"]["role"] == "user"  # just before the prompt
    (read,) = tool_results(es, "read_workspace_rule")
    assert IMAGES["body"] in read["content"][0]["text"] and read["details"]["revision"] == 1

    # A loaded note is not hinted again; a prompt matching only other notes gets those.
    es = ask(api, sid, "Generate images for card three")
    assert len(custom(es, "gamma.knowledge_hints")) == 1
    es = ask(api, sid, "Check the titles and the investment figures")
    hinted = custom(es, "gamma.knowledge_hints")[-1]["details"]["notes"]
    assert [n["id"] for n in hinted] == ["legal", "tone"] or [n["id"] for n in hinted] == ["tone", "legal"]

    # Changed while live: the proxy's workspace_update, recorded at the next prompt (idle, no task).
    changed = api.put("/knowledge/note-brand-images", json={**IMAGES, "body": "Photos only, from the 2026 library."})
    assert changed.json()["revision"] == 2
    es = ask(api, sid, read_script("note-brand-images"))
    (update,) = custom(es, "gamma.workspace_update")
    assert update["details"]["sourceId"] == "knowledge:note-brand-images@2" and 'revision="2"' in update["content"]
    assert [n["id"] for n in custom(es, "gamma.knowledge_hints")[-1]["details"]["notes"]] == ["note-brand-images"]
    assert tool_results(es, "read_workspace_rule")[-1]["details"]["revision"] == 2

    # Compaction restores the loaded note (its current copy) as an anchor.
    resp = api.post(f"/sessions/{sid}/compact", json={})
    assert resp.status_code == 200, resp.text
    es = wait_sync(lambda: (lambda es: es if any(e["type"] == "compaction" for e in es) else None)(entries(api, sid)),
                   timeout=90, interval=0.3, what="a compaction entry")
    at = max(i for i, e in enumerate(es) if e["type"] == "compaction")
    anchors = [e for e in es[at + 1:] if e["type"] == "custom_message" and e["customType"] == "gamma.active_knowledge"]
    assert [(a["details"]["knowledgeId"], a["details"]["revision"]) for a in anchors] == [("note-brand-images", 2)]
    assert "2026 library" in anchors[0]["content"]

    # Deleted while live: the update says so, and the copy stops counting (it is not restored).
    assert api.delete("/knowledge/note-brand-images").status_code == 204
    es = ask(api, sid, "hello again")
    deleted = [u for u in custom(es, "gamma.workspace_update") if u["details"]["sourceId"] == "knowledge:note-brand-images@3"]
    assert len(deleted) == 1 and "was deleted" in deleted[0]["content"]


def test_changed_while_dormant_arrives_at_the_next_prompt(api: httpx.Client) -> None:
    assert api.put("/knowledge/dormant-note", json={**TONE, "scope": "Use for quarterly dormancy reports."}).status_code == 200
    sid = api.post("/sessions").json()["id"]
    ask(api, sid, read_script("dormant-note"))
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    wait_sync(lambda: api.get(f"/sessions/{sid}").json()["status"] == "dormant", timeout=30, what="dormant")
    rev = api.put("/knowledge/dormant-note", json={**TONE, "scope": "Use for quarterly dormancy reports.",
                                                    "body": "New body."}).json()["revision"]
    es = ask(api, sid, "hello after the wake")
    (update,) = custom(es, "gamma.workspace_update")
    assert update["details"]["sourceId"] == f"knowledge:dormant-note@{rev}"
    user_at = max(i for i, e in enumerate(es) if e["type"] == "message" and e["message"]["role"] == "user")
    assert es.index(update) < user_at  # before the prompt it came with


def test_large_body_is_returned_as_a_workspace_file(api: httpx.Client) -> None:
    body = "Rule line.\n" * 200  # past GAMMA_KNOWLEDGE_INLINE_CHARS=1000
    assert api.put("/knowledge/big-note", json={**LEGAL, "body": body}).status_code == 200
    sid = api.post("/sessions").json()["id"]
    es = ask(api, sid, read_script("big-note", "no-such-note"))
    big, missing = tool_results(es, "read_workspace_rule")
    assert big["details"]["path"] == "knowledge/big-note.md" and "knowledge/big-note.md" in big["content"][0]["text"]
    assert body not in big["content"][0]["text"]
    assert api.get(f"/sessions/{sid}/workspace/files/knowledge/big-note.md").text == body
    assert missing["isError"] and "no-such-note" in missing["content"][0]["text"]
    assert json.dumps(es).count("Rule line.") == 0  # the body never entered the transcript
