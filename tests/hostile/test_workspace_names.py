"""Workspace names that are not UTF-8 (docs/architecture.md "Workspace names"), against the real services.

Before: one such name (the agent's `tar -xf` of a Latin-1 archive) made the listing answer 500 and a
DELETE 400, and once the session was dormant every wake failed on the status event's `viewableFiles`
(`surrogates not allowed`): prompts were never answered. After: every name is shown with the
reversible escapes (`\\xHH` for a byte, `\\\\` for a backslash), GET and DELETE take the shown name,
and a session already holding such a name wakes. The names are made directly on disk, as a command
in the session's workspace could.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from tests.hostile.ws_support import client, live_session, new_session, say, start_stack, workspace
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(300)
FILES = "/sessions/{sid}/workspace/files/{path}"
LATIN1_DIR, LATIN1_FILE = b"caf\xe9", b"r\xe9sum\xe9.txt"  # "café/résumé.txt" as Latin-1 bytes
ODD = b"a\\b\nc"  # a backslash and a newline: valid UTF-8, shown escaped so the escapes stay reversible


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(module_redis_url, tmp_path_factory, "ws-names")


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[httpx.Client]:
    with client(stack) as c:
        yield c


@pytest.fixture(scope="module")
def live_sid(api: httpx.Client) -> str:
    return live_session(api)


@pytest.fixture(params=["live", "dormant"])
def sid(request: pytest.FixtureRequest, api: httpx.Client, live_sid: str) -> str:
    return live_sid if request.param == "live" else new_session(api)


def plant_bytes(stack: Stack, sid: str) -> bytes:
    """café/résumé.txt and a\\b<newline>c in Latin-1 / raw bytes; returns the workspace as bytes."""
    ws = os.fsencode(workspace(stack, sid))
    os.makedirs(ws, exist_ok=True)
    os.makedirs(ws + b"/" + LATIN1_DIR, exist_ok=True)
    with open(ws + b"/" + LATIN1_DIR + b"/" + LATIN1_FILE, "wb") as f:
        f.write(b"latin-1")
    with open(ws + b"/" + ODD, "wb") as f:
        f.write(b"odd")
    return ws


def url(sid: str, shown: str) -> str:
    return FILES.format(sid=sid, path=quote(shown, safe="/"))


def test_a_name_that_is_not_utf8_is_listed_escaped_read_and_deleted(api: httpx.Client, stack: Stack,
                                                                    sid: str) -> None:
    ws = plant_bytes(stack, sid)
    listing = api.get(FILES.format(sid=sid, path=""))
    assert listing.status_code == 200, listing.text
    names = {e["name"] for e in listing.json()["entries"]}
    assert {"caf\\xE9", "a\\\\b\\x0Ac"} <= names
    inner = api.get(url(sid, "caf\\xE9/"))
    assert inner.status_code == 200 and [e["name"] for e in inner.json()["entries"]] == ["r\\xE9sum\\xE9.txt"]
    assert api.get(url(sid, "caf\\xE9/r\\xE9sum\\xE9.txt")).content == b"latin-1"
    assert api.get(url(sid, "a\\\\b\\x0Ac")).content == b"odd"
    # A backslash that is no escape, and a new file with an escaped name, are refused.
    assert api.get(url(sid, "caf\\e9")).status_code == 400
    put = api.put(url(sid, "new\\xE9.txt"), content=b"x")
    assert put.status_code == 400 and "backslash" in put.json()["error"], put.text
    gone = api.delete(url(sid, "caf\\xE9/r\\xE9sum\\xE9.txt"))
    assert gone.status_code == 200 and gone.json()["path"] == "caf\\xE9/r\\xE9sum\\xE9.txt", gone.text
    assert os.listdir(ws + b"/" + LATIN1_DIR) == []
    tree = api.delete(url(sid, "caf\\xE9"), params={"recursive": 1})
    assert tree.status_code == 200, tree.text
    assert api.delete(url(sid, "a\\\\b\\x0Ac")).status_code == 200
    assert not os.path.exists(ws + b"/" + LATIN1_DIR) and not os.path.exists(ws + b"/" + ODD)


def test_a_dormant_session_holding_such_a_name_wakes_and_answers(api: httpx.Client, stack: Stack) -> None:
    sid = new_session(api)
    plant_bytes(stack, sid)  # as a command left it before the session went dormant
    export = api.get(f"/sessions/{sid}/export")
    assert export.status_code == 200, export.text
    with tarfile.open(fileobj=io.BytesIO(export.content), mode="r:gz", encoding="utf-8",
                      errors="surrogateescape") as tar:  # an archive carries the name's bytes themselves
        members = {os.fsencode(m.name) for m in tar.getmembers()}
    assert f"{sid}/workspace/".encode() + LATIN1_DIR + b"/" + LATIN1_FILE in members
    say(api, sid, "are you awake", "are you awake")
    assert api.get(f"/sessions/{sid}").json()["status"] == "live"
    say(api, sid, "still answering", "still answering")


def test_files_are_never_served_as_active_content(api: httpx.Client, stack: Stack, live_sid: str) -> None:
    """Before: `page.html` came back `text/html` (and `.svg` `image/svg+xml`) without `nosniff` or a
    disposition: script a command wrote ran in the proxy's origin."""
    ws = workspace(stack, live_sid)
    for name, body in (("page.html", b"<script>alert(1)</script>"), ("pic.svg", b"<svg onload='alert(1)'/>"),
                       ("x.png", b"\x89PNG\r\n\x1a\n"), ("notes.txt", b"hello")):
        (ws / name).write_bytes(body)
    html, svg = api.get(url(live_sid, "page.html")), api.get(url(live_sid, "pic.svg"))
    for resp in (html, svg):
        assert resp.status_code == 200 and resp.headers["content-type"] == "application/octet-stream"
        assert resp.headers["x-content-type-options"] == "nosniff"
        assert resp.headers["content-disposition"].startswith("attachment")
    png = api.get(url(live_sid, "x.png"))
    assert png.headers["content-type"] == "image/png" and png.headers["content-disposition"].startswith("inline")
    text = api.get(url(live_sid, "notes.txt"))
    assert text.headers["content-type"].startswith("text/plain") and text.headers["x-content-type-options"] == "nosniff"
    assert text.headers["content-disposition"] == "attachment; filename*=UTF-8''notes.txt"
