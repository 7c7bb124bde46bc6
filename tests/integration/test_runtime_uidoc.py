"""SessionUIState identity across a wake, and snapshot-only clients while live (in-process runtime,
real Redis). The dormant bytes are built exactly as the proxy's dormant `GET /ui` builds them."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from pycrdt import Doc, Map

from services.proxy.dormant.preview import read_ui
from shared.contracts.streams.inbox import UiUpdate
from shared.redis import keys
from shared.storage.disk import atomic_write_json, session_paths
from shared.ui.uidoc import EMPTY_UPDATE, ROOT, doc_from_snapshot, snapshot_of
from shared.ui.uirules import default_snapshot
from tests.integration.runtime_inproc import InProc, inproc_worker

STATE = {
    "panes": [{"id": "main", "tabIds": ["t1"]}],
    "tabs": {"t1": {"id": "t1", "ari": "file:brief.xml", "title": "brief"}},
    "activeTabByPane": {"main": "t1"},
    "mobile": {"view": "chat", "filePaneOpen": False},
    "expandedDirs": [], "recentResources": ["file:brief.xml"], "researchSources": [],
    "activeForm": None, "callToAction": None, "schemaVersion": 1, "costs": [],
}


async def sync(inp: InProc, sid: str, update: bytes, snapshot: dict[str, Any] | None = None) -> dict[str, Any]:
    m = UiUpdate(session_id=sid, update=base64.b64encode(update).decode(), snapshot=snapshot)
    await inp.append(m)
    got = await inp.redis.blpop([keys.reply(sid, m.request_id)], timeout=10)
    assert got is not None, "no reply from the runtime"
    return dict(json.loads(got[1]))


def stored(data_dir: Path, sid: str) -> dict[str, Any]:
    return dict(json.loads(session_paths(data_dir, sid).state.read_text()))


async def test_client_seeded_from_dormant_ui_keeps_syncing_after_the_wake(redis_url: str, data_dir: Path) -> None:
    sid = "uiwake1"
    paths = session_paths(data_dir, sid)
    paths.state.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(paths.state, STATE)
    dormant_bytes = doc_from_snapshot(read_ui(paths)).get_update()  # the proxy's dormant GET /ui

    client = Doc()
    client.apply_update(dormant_bytes)
    seen = client.get_state()
    root = client.get(ROOT, type=Map)
    with client.transaction():
        tabs = root["tabs"]
        tabs["t2"] = Map({"id": "t2", "ari": "gamma:file:deck", "title": "Deck"})
        root["activeTabByPane"]["main"] = "t2"
    incremental = client.get_update(seen)

    async with inproc_worker(redis_url, data_dir) as inp:
        await inp.live(sid)
        reply = await sync(inp, sid, incremental)
        assert reply["status"] == 200, reply
        snapshot = reply["body"]["snapshot"]
        assert snapshot["tabs"]["t2"]["ari"] == "gamma:file:deck", "the incremental update was applied"
        assert snapshot["activeTabByPane"] == {"main": "t2"}
        assert stored(data_dir, sid)["tabs"]["t2"]["title"] == "Deck"
        assert await inp.events(sid, "ui_update"), "the change went out to other clients"
        # And the runtime's full state merges into the client without conflict: both converge.
        client.apply_update(base64.b64decode(reply["body"]["update"]))
        assert snapshot_of(client)["tabs"] == snapshot["tabs"]


async def test_live_snapshot_only_sync_is_applied_and_validated(redis_url: str, data_dir: Path) -> None:
    sid = "uisnap1"
    async with inproc_worker(redis_url, data_dir) as inp:
        await inp.live(sid)
        wanted = {**STATE, "mobile": {"view": "files", "filePaneOpen": True}, "expandedDirs": ["notes"]}
        reply = await sync(inp, sid, EMPTY_UPDATE, wanted)
        assert reply["status"] == 200, reply
        assert reply["body"]["snapshot"]["mobile"] == {"view": "files", "filePaneOpen": True}
        assert reply["body"]["snapshot"]["tabs"] == STATE["tabs"]
        assert stored(data_dir, sid)["expandedDirs"] == ["notes"]
        events = await inp.events(sid, "ui_update")
        assert events and set(events[-1]) == {"update"}, "the change goes out, not the document"
        follower = doc_from_snapshot(default_snapshot())  # a client holding the old state (no state.json)
        follower.apply_update(base64.b64decode(events[-1]["update"]))
        assert snapshot_of(follower)["mobile"] == {"view": "files", "filePaneOpen": True}
        # The update published is what changed: a client holding the old state converges with it.
        again = await sync(inp, sid, EMPTY_UPDATE, wanted)
        assert again["status"] == 200 and len(await inp.events(sid, "ui_update")) == len(events)

        bad = await sync(inp, sid, EMPTY_UPDATE, {**wanted, "mobile": {"view": "sideways"}})
        assert bad["status"] == 422 and "SessionUIState" in bad["body"]["error"]
        unknown = await sync(inp, sid, EMPTY_UPDATE, {**wanted, "cursor": 3})
        assert unknown["status"] == 422
        assert stored(data_dir, sid)["mobile"]["view"] == "files", "a refused snapshot changes nothing"
