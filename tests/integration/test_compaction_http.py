"""Compaction through the public API, all five services: `POST /sessions/{id}/compact` with custom
instructions, and the threshold taken from the session's own model configuration."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from scripted.reading import parse_summary
from services.runtime.model.convert import SUMMARY_PREFIX
from shared.storage.disk import session_paths
from tests.integration.runtime_support import Driver
from tests.support.compaction_model import RecordingModel, call, done, reply, text_of
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)


@dataclass
class Api:
    stack: Stack
    model: RecordingModel
    http: httpx.Client
    d: Driver

    def wait(self, pred: Any, what: str, timeout: float = 60) -> None:
        wait_sync(pred, timeout=timeout, what=what)

    def transcript(self, sid: str) -> list[dict[str, Any]]:
        resp = self.http.get(f"/sessions/{sid}/transcript")
        assert resp.status_code == 200, resp.text
        return list(resp.json()["entries"])

    def compactions(self, sid: str) -> list[dict[str, Any]]:
        return [e for e in self.transcript(sid) if e["type"] == "compaction"]

    def runs(self, sid: str) -> int:
        return sum(1 for e in self.d.events(sid) if e["type"] == "agent_end")


@pytest.fixture(scope="module")
def api(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    model = RecordingModel().start()
    # The process-wide window is large: only a session's own model configuration makes it compact.
    stack = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("compaction-http"), env_overrides={
        **model.env(), "GAMMA_CONTEXT_WINDOW": "128000", "GAMMA_RESERVE_TOKENS": "2000",
        "GAMMA_KEEP_RECENT_TOKENS": "1500",
    })
    stack.start()
    http = httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)
    try:
        yield Api(stack, model, http, Driver(stack.redis_url))
    finally:
        http.close()
        stack.stop()
        model.stop()


def notes(api: Api, sid: str, count: int) -> list[str]:
    folder = session_paths(api.stack.data_dir, sid).workspace / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        (folder / f"n{i}.md").write_text("\n".join(
            f"Pricing note {i}.{n}: the enterprise tier costs more than the team tier for every seat count."
            for n in range(48)))
        out.append(f"notes/n{i}.md")
    return out


def create(api: Api, **body: Any) -> str:
    resp = api.http.post("/sessions", json=body)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def say(api: Api, sid: str, text: str) -> None:
    resp = api.http.post(f"/sessions/{sid}/messages", json={"message": text})
    assert resp.status_code == 202, resp.text


def test_post_compact_with_instructions(api: Api) -> None:
    sid = create(api)
    api.model.script(*[reply(call("read", path=p)) for p in notes(api, sid, 3)], done("Read the pricing notes."))
    say(api, sid, "Read the pricing notes and compare the tiers.")
    api.wait(lambda: api.runs(sid) >= 1, "the first run")
    resp = api.http.post(f"/sessions/{sid}/compact", json={"instructions": "the enterprise tier pricing"})
    assert resp.status_code == 200, resp.text
    rid = resp.json()["request_id"]
    api.wait(lambda: len(api.compactions(sid)) == 1, "the compaction entry")
    (entry,) = api.compactions(sid)
    assert entry["requestId"] == rid
    sections = parse_summary(entry["summary"])
    assert "Requested focus: the enterprise tier pricing" in sections.get("## Critical Context")
    assert any("Read the pricing notes" in g for g in sections.get("## Goal"))
    assert entry["details"]["readFiles"] == ["notes/n0.md", "notes/n1.md", "notes/n2.md"]
    assert "Additional focus: the enterprise tier pricing" in text_of(api.model.summaries[-1])
    api.model.script(done("Compared."))
    say(api, sid, "Which tier is cheaper?")
    api.wait(lambda: api.runs(sid) >= 2, "the second run")
    assert SUMMARY_PREFIX in text_of(api.model.requests[-1])


def test_compact_on_a_dormant_session_is_refused(api: Api) -> None:
    sid = create(api)
    resp = api.http.post(f"/sessions/{sid}/compact", json={})
    assert resp.status_code == 409 and "live" in resp.json()["error"]


def test_the_sessions_own_context_window_sets_the_threshold(api: Api) -> None:
    # The window leaves room for the static prefix (base: 6,000 tokens, tests/golden/prefix/tokens.json)
    # plus the summary and the 1,500 recent tokens a compaction keeps, or no compaction can get under it.
    sid = create(api, model={"context_window": 10000})
    paths = notes(api, sid, 8)
    api.model.agent_delay_s = 0.25
    try:
        api.model.script(*[reply(call("read", path=p)) for p in paths], done("Read all notes."))
        say(api, sid, "Read every pricing note.")
        api.wait(lambda: api.runs(sid) >= 1, "the run", timeout=90)
    finally:
        api.model.agent_delay_s = 0.0
    applied = [e["data"] for e in api.d.events(sid) if e["type"] == "compaction" and e["data"]["phase"] == "applied"]
    assert applied, "a 10,000-token window with 2,000 reserved must compact within eight 1,200-token reads"
    assert all(a["tokensBefore"] > 10000 - 2000 > a["tokensAfter"] for a in applied)
