"""No tenant's input runs unbounded on a process other tenants share (docs/architecture.md "Bounded
work"), through the five services: while alice attacks, bob's prompts are answered.

Before: a connector call whose `uniqueItems` array held 4,500 objects stalled the runtime worker's
loop for over a minute (jsonschema compares unsortable items pairwise), and a 46-character string
against `^(a|aa)+$` for far longer (Python's backtracking `re`); a self-referencing `$ref` registered
and every call of the tool failed; images were decoded in full inside the proxy and the runtime: a
16-bit 7000x7000 PNG of ~1 MB cost ~550 MB per decode, six at once several GB, a truncated PNG cost
a full decode every time it was sent, a 1.9 KB WebP 196 MB.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from tests.integration.runtime_support import call, done
from tests.support.bombs import WEBP_7000, png_of_zeros
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries, new_session, tool_results
from tests.support.stack import API_TOKEN, OTHER_TOKEN, SERVICE_TOKEN, Stack

pytestmark = pytest.mark.timeout(300)
ANSWER_S = 45  # bob's prompt answered within this, attack or not: a stalled loop answers nothing for minutes
MEMORY_GROWTH = 300 * 1024 * 1024  # a service and its decoders together, over the whole attack


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("stalls"),
              env_overrides={"GAMMA_DYNAMIC_TOOLS": "1"})
    try:
        s.start()
        yield s
    finally:
        s.stop()


def client(stack: Stack, token: str = API_TOKEN) -> httpx.Client:
    return httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {token}"}, timeout=60)


def compact_script(*steps: dict[str, Any]) -> str:
    return "script:" + json.dumps(list(steps), separators=(",", ":"))


def register(stack: Stack, name: str, parameters: dict[str, Any]) -> httpx.Response:
    spec = {"description": "a test connector", "tools": [{"name": "put", "description": "takes a value",
                                                          "parameters": parameters, "timeout_s": 5}]}
    return httpx.put(f"{stack.url('notifications')}/connectors/{name}", json=spec, timeout=30,
                     headers={"Authorization": f"Bearer {SERVICE_TOKEN}"})


def bob_answers_meanwhile(stack: Stack, rounds: int = 3) -> None:
    """Bob's prompts, one after another, each answered in time (the attack runs meanwhile)."""
    with client(stack, OTHER_TOKEN) as bob:
        sid = new_session(bob)
        for i in range(rounds):
            es = ask(bob, sid, compact_script(done(f"pong {i}")), timeout_s=ANSWER_S)
            assert tool_results(es, "message_user")


def attack_and_answer(stack: Stack, alice: httpx.Client, sid: str, message: str) -> list[dict[str, Any]]:
    resp = alice.post(f"/sessions/{sid}/messages", json={"message": message})
    assert resp.status_code == 202, resp.text
    bob_answers_meanwhile(stack)
    return wait_sync(lambda: (lambda es: es if tool_results(es, "message_user") else None)(entries(alice, sid)),
                     timeout=ANSWER_S, what="alice's run answered")


def connector_attack(stack: Stack, name: str, prop: dict[str, Any], value: Any) -> dict[str, Any]:
    assert register(stack, name, {"type": "object", "properties": {"v": prop}, "required": ["v"]}).status_code == 200
    with client(stack) as alice:
        sid = new_session(alice)
        es = attack_and_answer(stack, alice, sid, compact_script(
            {"tool_calls": [call("load_tools", namespace=f"connector:{name}")]},
            {"tool_calls": [call(f"{name}__put", v=value)]}, done()))
    (result,) = tool_results(es, f"{name}__put")
    r = redis.Redis.from_url(stack.redis_url)
    assert not r.xrange(keys.connector_calls(name))  # refused before it was sent
    return result


def test_a_unique_items_array_of_thousands_of_objects_does_not_stall_the_worker(stack: Stack) -> None:
    items = [{"a": i} for i in range(4_500)] + [{"a": 0}]  # the duplicate comes last: every pair compared
    result = connector_attack(stack, "bulk", {"type": "array", "uniqueItems": True, "items": {"type": "object"}}, items)
    text = result["content"][0]["text"]
    assert result["isError"] and "non-unique" in text and "not sent" in text


def test_arguments_past_the_budget_are_refused_before_the_schema_runs(stack: Stack) -> None:
    result = connector_attack(stack, "wide", {"type": "array", "items": {"type": "integer"}}, list(range(12_000)))
    assert result["isError"] and "over 10000 values" in result["content"][0]["text"]


def test_a_backtracking_pattern_runs_in_linear_time(stack: Stack) -> None:
    result = connector_attack(stack, "regex", {"type": "string", "pattern": "^(a|aa)+$"}, "a" * 45 + "!")
    assert result["isError"] and "does not match" in result["content"][0]["text"]


@pytest.mark.parametrize(("parameters", "loc"), [
    ({"type": "object", "$defs": {"a": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
     ["$defs", "a", "$ref"]),
    ({"type": "object", "properties": {"x": {"anyOf": [{"$ref": "#/properties/x"}, {"type": "string"}]}}},
     ["properties", "x", "anyOf"]),
    ({"type": "object", "properties": {"x": {"type": "string", "pattern": "(a)\\1"}}}, ["properties", "x", "pattern"]),
])
def test_a_schema_whose_check_cannot_end_is_refused_at_registration(stack: Stack, parameters: dict[str, Any],
                                                                    loc: list[Any]) -> None:
    resp = register(stack, "loops", parameters)
    assert resp.status_code == 422, resp.text
    where = ["body", "tools", 0, "parameters", *loc]
    assert any(e["loc"][: len(where)] == where for e in resp.json()["detail"]), resp.json()
    assert httpx.get(f"{stack.url('notifications')}/connectors/loops", timeout=30,
                     headers={"Authorization": f"Bearer {SERVICE_TOKEN}"}).status_code == 404


def test_a_recursive_structure_through_properties_still_registers(stack: Stack) -> None:
    tree = {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}}
    assert register(stack, "tree", tree).status_code == 200


# ---------------------------------------------------------------- images

def peak_bytes(pid: int) -> int:
    """VmHWM of the process and of each child it has (the decoding workers)."""
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if proc.name == str(pid) or fields.get("PPid", "").strip() == str(pid):
            total += int(fields.get("VmHWM", "0 kB").split()[0]) * 1024
    return total


def put(api: httpx.Client, sid: str, path: str, data: bytes) -> None:
    resp = api.put(f"/sessions/{sid}/workspace/files/{path}", content=data)
    assert resp.status_code == 200, resp.text


def test_six_deep_png_attachments_at_once_are_refused_from_their_header(stack: Stack) -> None:
    deep = png_of_zeros(7000, 7000, colour=2, depth=16)
    with client(stack) as alice:
        sid = new_session(alice)
        for i in range(6):
            put(alice, sid, f"deep{i}.png", deep)
        put(alice, sid, "bomb.webp", WEBP_7000)
        before = peak_bytes(stack.procs["proxy"].pid)

        def attach(path: str) -> httpx.Response:
            with client(stack) as c:
                return c.post(f"/sessions/{sid}/messages", json={"message": "look", "attachments": [path]})

        with concurrent.futures.ThreadPoolExecutor(7) as pool:
            answers = list(pool.map(attach, [*(f"deep{i}.png" for i in range(6)), "bomb.webp"]))
            bob_answers_meanwhile(stack, rounds=1)
        for resp in answers:
            assert resp.status_code in (413, 429), resp.text  # past the decoded-bytes bound, or one user's bound
        assert any(r.status_code == 413 and "bytes decoded" in r.text for r in answers)
        assert peak_bytes(stack.procs["proxy"].pid) - before < MEMORY_GROWTH
        assert not (stack.data_dir / "sessions" / sid / ".images").exists()  # nothing stored


def test_a_corrupt_png_fails_fast_and_its_refusal_is_remembered(stack: Stack) -> None:
    corrupt = png_of_zeros(7000, 7000, colour=0, depth=8, truncate=True)  # 49 M pixels, under every bound
    with client(stack) as alice:
        sid = new_session(alice)
        put(alice, sid, "broken.png", corrupt)
        for _ in range(2):
            resp = alice.post(f"/sessions/{sid}/messages", json={"message": "look", "attachments": ["broken.png"]})
            assert resp.status_code == 422 and "truncated" in resp.text, resp.text
    assert "image_refused_again" in stack.log("proxy")  # the second cost a hash, not a decode


def test_parallel_reads_of_deep_images_leave_the_worker_bounded_and_answering(stack: Stack) -> None:
    deep = png_of_zeros(7000, 7000, colour=2, depth=16)
    with client(stack) as alice:
        sid = new_session(alice)
        put(alice, sid, "deep.png", deep)
        put(alice, sid, "bomb.webp", WEBP_7000)
        before = peak_bytes(stack.procs["runtime"].pid)
        reads = [call("read", path="deep.png") for _ in range(5)] + [call("show_file", path="bomb.webp", look=True)]
        es = attack_and_answer(stack, alice, sid, compact_script({"tool_calls": reads}, done()))
    outcomes = tool_results(es, "read") + tool_results(es, "show_file")
    assert len(outcomes) == 6
    texts = [r["content"][0]["text"] for r in tool_results(es, "read") if r["isError"]]
    assert len(texts) == 5  # each refused: past the decoded-bytes bound, or past alice's decodes in flight
    assert all("bytes decoded" in t or "being decoded already" in t for t in texts), texts
    assert any("bytes decoded" in t for t in texts), texts
    assert peak_bytes(stack.procs["runtime"].pid) - before < MEMORY_GROWTH
    assert os.path.exists(stack.data_dir / "sessions" / sid / "workspace" / "deep.png")
