"""Workspace paths (docs/architecture.md "Limits on hostile input") and links planted in the workspace (README "Security").

Before: a 256-byte segment gave 500; invalid UTF-8 became U+FFFD (different names aliased one file);
NFC and NFD spellings were two files; `PUT name/` wrote `name`; the file tools and the proxy resolved
a path and then opened it, so a link a sandboxed command planted (or swapped in between) led out of
the workspace. After: 400s for the bad names, one file per NFC name, and no link out is followed by
read/write/edit or the proxy's GET/PUT, live or dormant. Links are made directly on disk, as a command
in the session's workspace could.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterator

import httpx
import pytest

from tests.hostile.ws_support import (
    call,
    client,
    live_session,
    new_session,
    run_tools,
    start_stack,
    tool_results,
    workspace,
)
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(300)
FILES = "/sessions/{sid}/workspace/files/{path}"
NFC = unicodedata.normalize("NFC", "résumé.md")
NFD = unicodedata.normalize("NFD", "résumé.md")


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(module_redis_url, tmp_path_factory, "ws-paths")


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


def names(stack: Stack, sid: str) -> set[str]:
    ws = workspace(stack, sid)
    return {p.name for p in ws.iterdir()} if ws.exists() else set()


def plant(stack: Stack, sid: str, *files: str) -> None:
    """Files as an earlier run (or a command) left them, made directly on disk."""
    for f in files:
        path = workspace(stack, sid) / f
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"planted")


def test_a_256_byte_segment_is_400_and_255_bytes_are_fine(api: httpx.Client, stack: Stack, sid: str) -> None:
    ok, too_long = "é" * 127 + "x", "é" * 128  # 255 and 256 bytes of UTF-8, 128 characters each
    plant(stack, sid, ok)
    for method in (api.put, api.get):
        resp = method(FILES.format(sid=sid, path=too_long), **({"content": b"x"} if method is api.put else {}))
        assert resp.status_code == 400 and "256 bytes" in resp.json()["error"], resp.text
        resp = method(FILES.format(sid=sid, path=f"dir/{too_long}/f"), **({"content": b"x"} if method is api.put else {}))
        assert resp.status_code == 400, resp.text
    assert api.put(FILES.format(sid=sid, path=ok), content=b"fits").status_code == 200
    assert api.get(FILES.format(sid=sid, path=ok)).content == b"fits"
    assert too_long not in names(stack, sid) and "dir" not in names(stack, sid)


def test_invalid_utf8_is_400_never_an_alias(api: httpx.Client, stack: Stack, sid: str) -> None:
    plant(stack, sid, "\ufffd.txt")  # the name both invalid spellings would decode to (U+FFFD)
    before = names(stack, sid)
    for raw in ("%FF.txt", "%FE.txt", "ok/%C3%28.txt"):
        resp = api.put(FILES.format(sid=sid, path=raw), content=b"alias?")
        assert resp.status_code == 400 and "UTF-8" in resp.json()["error"], resp.text
        assert api.get(FILES.format(sid=sid, path=raw)).status_code == 400
    assert names(stack, sid) == before and (workspace(stack, sid) / "\ufffd.txt").read_bytes() == b"planted"
    # A real U+FFFD in a valid name is just a name.
    assert api.put(FILES.format(sid=sid, path="%EF%BF%BD.txt"), content=b"mine").status_code == 200
    assert (workspace(stack, sid) / "\ufffd.txt").read_bytes() == b"mine"


def test_nfc_and_nfd_name_one_file(api: httpx.Client, stack: Stack, sid: str) -> None:
    plant(stack, sid, NFC)
    assert api.put(FILES.format(sid=sid, path=NFD), content=b"decomposed").status_code == 200
    assert api.get(FILES.format(sid=sid, path=NFC)).content == b"decomposed"
    assert api.put(FILES.format(sid=sid, path=NFC), content=b"composed").status_code == 200
    assert api.get(FILES.format(sid=sid, path=NFD)).content == b"composed"
    spelled = [n for n in names(stack, sid) if unicodedata.normalize("NFC", n) == NFC]
    assert spelled == [NFC]


def test_put_with_a_trailing_slash_is_400(api: httpx.Client, stack: Stack, sid: str) -> None:
    plant(stack, sid, "name")
    resp = api.put(FILES.format(sid=sid, path="name/"), content=b"overwrite?")
    assert resp.status_code == 400 and "must not end with '/'" in resp.json()["error"], resp.text
    resp = api.put(FILES.format(sid=sid, path="fresh/"), content=b"create?")
    assert resp.status_code == 400
    assert (workspace(stack, sid) / "name").read_bytes() == b"planted" and "fresh" not in names(stack, sid)


def test_large_files_are_streamed_whole_from_the_opened_fd(api: httpx.Client, stack: Stack, sid: str) -> None:
    body = os.urandom(1024) * 1600  # 1.6 MB: over the in-memory threshold, under no cap (agent-made)
    plant(stack, sid, "big.bin")
    (workspace(stack, sid) / "big.bin").write_bytes(body)
    resp = api.get(FILES.format(sid=sid, path="big.bin"))
    (workspace(stack, sid) / "big.bin").unlink()  # over the module's small quota: the live session writes on
    assert resp.status_code == 200 and int(resp.headers["content-length"]) == len(body) and resp.content == body


# ---------------------------------------------------------------- links planted in the workspace


@pytest.fixture
def planted(api: httpx.Client, stack: Stack, sid: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """In `sid`'s workspace: links to a directory outside, to another session's workspace and to a
    file in it, and one climbing out with `..`."""
    other = new_session(api)
    plant(stack, other, "secret.txt")
    outside = tmp_path_factory.mktemp("outside")
    (outside / "passwd").write_bytes(b"root:x")
    ws = workspace(stack, sid)
    ws.mkdir(parents=True, exist_ok=True)
    tag = os.urandom(3).hex()
    links = {f"out-{tag}": str(outside), f"peer-{tag}": str(workspace(stack, other)),
             f"peerfile-{tag}": str(workspace(stack, other) / "secret.txt"), f"up-{tag}": "../../.."}
    for name, target in links.items():
        os.symlink(target, ws / name)
    return {"tag": tag, "outside": outside, "other": other}


def untouched(stack: Stack, planted: dict[str, object]) -> None:
    outside, other = planted["outside"], str(planted["other"])
    assert sorted(p.name for p in outside.iterdir()) == ["passwd"]  # type: ignore[attr-defined]
    assert names(stack, other) == {"secret.txt"}
    assert (workspace(stack, other) / "secret.txt").read_bytes() == b"planted"


def test_proxy_get_and_put_never_follow_a_link_out(api: httpx.Client, stack: Stack, sid: str,
                                                   planted: dict[str, object]) -> None:
    tag = planted["tag"]
    for path in (f"out-{tag}/passwd", f"peer-{tag}/secret.txt", f"peerfile-{tag}", f"up-{tag}/etc/passwd"):
        resp = api.get(FILES.format(sid=sid, path=path))
        assert resp.status_code == 400 and "symbolic link" in resp.json()["error"], (path, resp.text)
        assert b"root:x" not in resp.content and b"planted" not in resp.content
    for path in (f"out-{tag}/passwd", f"out-{tag}/new.txt", f"peer-{tag}/secret.txt", f"up-{tag}/tmp/x"):
        resp = api.put(FILES.format(sid=sid, path=path), content=b"pwned")
        assert resp.status_code == 400, (path, resp.text)
    for path in (f"out-{tag}/passwd", f"peer-{tag}/secret.txt", f"up-{tag}/etc/passwd"):
        resp = api.delete(FILES.format(sid=sid, path=path))  # docs/integration.md "Session row and liveness": DELETE, live and dormant
        assert resp.status_code == 400 and "symbolic link" in resp.json()["error"], (path, resp.text)
    listing = api.get(FILES.format(sid=sid, path="")).json()
    assert not [e for e in listing["entries"] if str(e["name"]).endswith(tag)]  # links are not listed
    untouched(stack, planted)
    # DELETE of a link removes the link itself, never what it points to.
    assert api.delete(FILES.format(sid=sid, path=f"peerfile-{tag}")).status_code == 200
    assert not os.path.lexists(workspace(stack, sid) / f"peerfile-{tag}")
    untouched(stack, planted)


def test_file_tools_never_follow_a_link_out(api: httpx.Client, stack: Stack, live_sid: str, sid: str,
                                            planted: dict[str, object]) -> None:
    if sid != live_sid:
        pytest.skip("tools run in live sessions only")
    tag = planted["tag"]
    steps = [
        call("read", path=f"peer-{tag}/secret.txt"),
        call("read", path=f"out-{tag}/passwd"),
        call("write", path=f"peer-{tag}/secret.txt", content="pwned"),
        call("write", path=f"out-{tag}/new.txt", content="pwned"),
        call("edit", path=f"peer-{tag}/secret.txt", old_text="planted", new_text="pwned"),
        call("edit", path=f"up-{tag}/etc/hostname", old_text="a", new_text="b"),
    ]
    before = {t: len(tool_results(stack, sid, t)) for t in ("read", "write", "edit")}
    run_tools(api, sid, *steps, marker=f"links tried {tag}")
    for tool in ("read", "write", "edit"):
        results = tool_results(stack, sid, tool)[before[tool]:]
        assert len(results) == 2 and all(is_error for is_error, _ in results), results
        assert all("symbolic link" in text for _, text in results), results
        assert not any("root:x" in text or "planted" in text for _, text in results)
    untouched(stack, planted)


def test_file_tools_follow_the_same_name_rules(api: httpx.Client, stack: Stack, live_sid: str, sid: str) -> None:
    if sid != live_sid:
        pytest.skip("tools run in live sessions only")
    tag = os.urandom(3).hex()
    steps = [
        call("write", path=f"{tag}-{NFD}", content="one file"),
        call("read", path=f"{tag}-{NFC}"),
        call("write", path=f"{tag}-dir/", content="x"),
        call("write", path=f"{tag}-" + "n" * 256, content="x"),
    ]
    before = {t: len(tool_results(stack, sid, t)) for t in ("read", "write")}
    run_tools(api, sid, *steps, marker=f"names tried {tag}")
    writes = tool_results(stack, sid, "write")[before["write"]:]
    reads = tool_results(stack, sid, "read")[before["read"]:]
    assert reads == [(False, "one file")]
    assert [w[0] for w in writes] == [False, True, True], writes
    assert "must not end with '/'" in writes[1][1] and "263 bytes" in writes[2][1]
    assert [n for n in names(stack, sid) if n.startswith(tag)] == [f"{tag}-{NFC}"]
