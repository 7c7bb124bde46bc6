"""Reading before writing, on the real stack (five processes, real Redis, the scripted model):

- a skill's own files are readable by path (`skills/import/checklist.yaml`, or `checklist.yaml` while
  import is active), never writable, never a way out of the skills directory;
- `write` and `edit` refuse a workspace file the user saved since the agent last read it, naming the
  save (prompts/interface.txt; services/runtime/store/file_reads.py), and go through after a read;
- `bash` is not stopped, but its result names the user-changed files it altered.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.polling import wait_sync
from tests.support.sessions import entries, new_session, tool_results
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
USER = {"authorization": f"Bearer {API_TOKEN}"}
WAIT_FOR_FLAG = "for i in $(seq 1 1200); do [ -f go.flag ] && exit 0; sleep 0.05; done; echo no flag; exit 1"


def step(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def done(text: str) -> dict[str, Any]:
    return step("message_user", message=text, blockOnUser=True)


@pytest.fixture(scope="module")
def http(module_stack: Stack) -> Any:
    with httpx.Client(base_url=module_stack.url(), headers=USER, timeout=30) as client:
        yield client


def send(http: httpx.Client, sid: str, *steps: dict[str, Any]) -> None:
    r = http.post(f"/sessions/{sid}/messages", json={"message": "script:" + json.dumps(list(steps))})
    assert r.status_code == 202, r.text


def answered(http: httpx.Client, sid: str, n: int) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        items = entries(http, sid)
        yields = [m for m in tool_results(items, "message_user") if (m.get("details") or {}).get("blockOnUser")]
        return items if len(yields) >= n and not http.get(f"/sessions/{sid}").json().get("running") else None
    return wait_sync(ready, timeout=120, interval=0.2, what=f"{n} answers")


def put(http: httpx.Client, sid: str, path: str, text: str) -> int:
    r = http.put(f"/sessions/{sid}/workspace/files/{path}", content=text.encode())
    assert r.status_code == 200, r.text
    return int(r.json()["revision"])


def file(http: httpx.Client, sid: str, path: str) -> str:
    r = http.get(f"/sessions/{sid}/workspace/files/{path}")
    assert r.status_code == 200, r.text
    return r.text


def text(m: dict[str, Any]) -> str:
    return "".join(c.get("text", "") for c in m["content"])


def test_a_skills_files_are_readable_by_path_and_read_only(http: httpx.Client) -> None:
    sid = new_session(http)
    send(http, sid, step("read", path="skills/import/checklist.yaml"), step("skill", name="import"),
         step("read", path="checklist.yaml"), step("read", path="skills/import/../../README.md"),
         step("read", path="skills/import/../deck-generation/SKILL.md"),
         step("write", path="skills/import/checklist.yaml", content="steps: []"),
         step("edit", path="skills/import/SKILL.md", old_text="import", new_text="x"), done("read"))
    reads = tool_results(answered(http, sid, 1), "read")
    named, relative, out, sideways = reads
    assert not named["isError"] and named["details"]["skillPath"] == "skills/import/checklist.yaml"
    assert "id:" in text(named) and text(named) == text(relative)  # the checklist, its step ids
    assert relative["details"]["skill"] == "import"  # no workspace file: the active skill's
    assert out["isError"] and sideways["isError"] and "No such file" in text(out)
    for tool in ("write", "edit"):
        (refused,) = tool_results(entries(http, sid), tool)
        assert refused["isError"] and "skills are read-only" in text(refused), refused
    assert http.get(f"/sessions/{sid}/workspace/files/skills/import/checklist.yaml").status_code == 404


def test_write_and_edit_refuse_a_file_the_user_saved_since_the_agent_read_it(http: httpx.Client) -> None:
    sid = new_session(http)
    put(http, sid, "brief.xml", "<brief>user v1</brief>")
    send(http, sid, step("read", path="brief.xml"), step("bash", command=WAIT_FOR_FLAG),
         step("write", path="brief.xml", content="<brief>agent</brief>"),  # the user saved v2 meanwhile
         step("edit", path="brief.xml", old_text="brief", new_text="Brief"),
         step("write", path="notes.md", content="never read, does not exist: fine"),
         step("read", path="brief.xml"), step("edit", path="brief.xml", old_text="user v2", new_text="user v2, agent"),
         done("edited"))
    wait_sync(lambda: tool_results(entries(http, sid), "read") or None, timeout=60, what="the first read")
    revision = put(http, sid, "brief.xml", "<brief>user v2</brief>")
    put(http, sid, "go.flag", "1")
    items = answered(http, sid, 1)
    write, fresh = tool_results(items, "write")
    first, second = tool_results(items, "edit")
    for refused in (write, first):
        assert refused["isError"], refused
        assert f"brief.xml changed since you last read it: the user or a collaborator saved it (revision {revision})" \
            in text(refused)
    assert not fresh["isError"] and not second["isError"], (fresh, second)
    assert file(http, sid, "brief.xml") == "<brief>user v2, agent</brief>"  # their change kept, then the agent's

    # idle: the user saves again; the agent's command alters the file and its result says so
    put(http, sid, "brief.xml", "<brief>user v3</brief>")
    send(http, sid, step("bash", command="printf ' appended' >> brief.xml"),
         step("write", path="brief.xml", content="<brief>agent only</brief>"), done("appended"))
    items = answered(http, sid, 2)
    bash = tool_results(items, "bash")[-1]
    assert bash["details"]["alteredUserFiles"][0].startswith("brief.xml (the user or a collaborator saved it"), bash
    assert "altered files that someone else changed" in text(bash)
    assert tool_results(items, "write")[-1]["isError"]  # the command's change is no read of theirs
    assert file(http, sid, "brief.xml") == "<brief>user v3</brief> appended"
