"""shared/storage/disk.py: atomic writes, torn-tolerant JSON Lines, size limits, workspace path safety."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.storage import disk
from shared.storage.disk import PathRefused, TooLarge

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- atomic writes


def _temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "todo.json"
    disk.atomic_write_json(target, {"revision": 1})
    disk.atomic_write_json(target, {"revision": 2, "items": []})
    assert disk.read_json(target) == {"revision": 2, "items": []}
    assert _temps(target.parent) == []


def test_failed_rename_keeps_old_file_and_removes_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state.json"
    disk.atomic_write_json(target, {"old": True})

    def boom(src: object, dst: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(disk.os, "replace", boom)
    with pytest.raises(OSError, match="simulated crash"):
        disk.atomic_write_json(target, {"new": True, "pad": "x" * 100_000})
    assert json.loads(target.read_bytes()) == {"old": True}
    assert _temps(tmp_path) == []


def test_process_killed_between_temp_write_and_rename_leaves_old_file(tmp_path: Path) -> None:
    """A real crash (SIGKILL) after the temp file is fsynced but before the rename."""
    target = tmp_path / "todo.json"
    disk.atomic_write_json(target, {"revision": 1, "items": ["a"]})
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from shared.storage import disk

        def die(src, dst):
            # The temp file is complete and fsynced here; the process dies before the rename.
            assert Path(src).read_bytes().startswith(b'{{"revision":2')
            os.kill(os.getpid(), signal.SIGKILL)

        disk.os.replace = die
        disk.atomic_write_json(Path({str(target)!r}), {{"revision": 2, "items": ["b"] * 10000}})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert json.loads(target.read_bytes()) == {"revision": 1, "items": ["a"]}
    # The dead process could not clean up its temp file, but it is never the target and the next
    # write still succeeds.
    assert all(name.startswith(".todo.json.") for name in _temps(tmp_path))
    disk.atomic_write_json(target, {"revision": 3})
    assert disk.read_json(target) == {"revision": 3}


def test_read_json_missing_is_none(tmp_path: Path) -> None:
    assert disk.read_json(tmp_path / "nope.json") is None


# ---------------------------------------------------------------- JSON Lines


def test_jsonl_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    disk.append_jsonl(path, [{"id": "1"}, {"id": "2"}])
    disk.append_jsonl(path, [{"id": "3", "text": "ünïcode\nnewline"}])
    disk.append_jsonl(path, [])
    assert [e["id"] for e in disk.iter_jsonl(path)] == ["1", "2", "3"]
    assert list(disk.iter_jsonl(tmp_path / "missing.jsonl")) == []


def test_writes_make_a_missing_directory_and_leave_an_existing_one_as_it_is(tmp_path: Path) -> None:
    """The directory is made only when the first try finds it missing (no mkdir before every write)."""
    disk.append_jsonl(tmp_path / "a" / "b" / "log.jsonl", [{"id": "1"}])
    disk.atomic_write_bytes(tmp_path / "c" / "d" / "state.json", b"{}")
    assert [e["id"] for e in disk.iter_jsonl(tmp_path / "a" / "b" / "log.jsonl")] == ["1"]
    assert (tmp_path / "c" / "d" / "state.json").read_bytes() == b"{}"
    (tmp_path / "a" / "b").chmod(0o755)
    disk.append_jsonl(tmp_path / "a" / "b" / "log.jsonl", [{"id": "2"}])
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o755
    assert [e["id"] for e in disk.iter_jsonl(tmp_path / "a" / "b" / "log.jsonl")] == ["1", "2"]
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(NotADirectoryError):  # a file where the directory should be: refused, not replaced
        disk.append_jsonl(tmp_path / "file" / "log.jsonl", [{"id": "1"}])
    assert (tmp_path / "file").read_bytes() == b"x"


def test_torn_last_line_is_ignored_then_repaired(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    disk.append_jsonl(path, [{"id": "1"}, {"id": "2"}])
    with open(path, "ab") as fh:
        fh.write(b'{"id": "3", "mess')  # a crash mid-write
    assert [e["id"] for e in disk.iter_jsonl(path)] == ["1", "2"]

    disk.append_jsonl(path, [{"id": "4"}])
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    assert b'"mess' not in raw
    assert [e["id"] for e in disk.iter_jsonl(path)] == ["1", "2", "4"]


def test_torn_line_that_happens_to_be_valid_json_is_still_torn(tmp_path: Path) -> None:
    """Without its newline a line was not completely written: read and repair agree on dropping it."""
    path = tmp_path / "t.jsonl"
    disk.append_jsonl(path, [{"id": "1"}])
    with open(path, "ab") as fh:
        fh.write(b'{"id": "2"}')
    assert [e["id"] for e in disk.iter_jsonl(path)] == ["1"]
    disk.append_jsonl(path, [{"id": "3"}])
    assert [e["id"] for e in disk.iter_jsonl(path)] == ["1", "3"]


def test_torn_only_line_and_long_torn_tail_are_repaired(tmp_path: Path) -> None:
    only = tmp_path / "only.jsonl"
    only.write_bytes(b'{"id": "torn')
    assert list(disk.iter_jsonl(only)) == []
    disk.append_jsonl(only, [{"id": "1"}])
    assert only.read_bytes() == b'{"id":"1"}\n'

    # A torn tail longer than the repair's read-back chunk.
    long = tmp_path / "long.jsonl"
    disk.append_jsonl(long, [{"id": "1"}])
    with open(long, "ab") as fh:
        fh.write(b'{"id": "2", "pad": "' + b"x" * 20_000)
    disk.append_jsonl(long, [{"id": "3"}])
    assert [e["id"] for e in disk.iter_jsonl(long)] == ["1", "3"]


def test_garbage_and_non_object_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"id": "1"}\nnot json\n[1, 2]\n\n{"id": "2"}\n')
    assert [e["id"] for e in disk.iter_jsonl(path)] == ["1", "2"]


# ---------------------------------------------------------------- size limits


def test_size_limit_has_clear_error() -> None:
    disk.check_size(b"x" * 10, 10)
    with pytest.raises(TooLarge) as err:
        disk.check_size(b"x" * 11, 10, what="workspace file")
    assert err.value.status == 413
    assert "workspace file is 11 bytes; the limit is 10 bytes" in str(err.value)


def test_path_length_limit() -> None:
    with pytest.raises(PathRefused, match="too long"):
        disk.resolve_workspace_path(Path("/tmp"), "a/" * disk.MAX_PATH_CHARS)


# ---------------------------------------------------------------- ids and layout


@pytest.mark.parametrize("sid", ["", "../x", "a/b", "a" * 65, "x\x00", "sp ace"])
def test_bad_session_ids_are_refused(tmp_path: Path, sid: str) -> None:
    with pytest.raises(PathRefused):
        disk.session_paths(tmp_path, sid)


@pytest.mark.parametrize("doc", ["", ".", "..", "a/b", "a\\b", "x\x00"])
def test_bad_document_ids_are_refused(tmp_path: Path, doc: str) -> None:
    with pytest.raises(PathRefused):
        disk.session_paths(tmp_path, "s1").document(doc)


def test_layout(tmp_path: Path) -> None:
    paths = disk.session_paths(tmp_path, "s_1")
    assert paths.root == tmp_path / "sessions" / "s_1"
    assert paths.transcript.name == "transcript.jsonl"
    assert paths.document("deck-1").name == "deck-1.json"
    assert paths.workspace == paths.root / "workspace"


# ---------------------------------------------------------------- workspace paths


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace with ordinary files and symlinks leading in and out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    ws = tmp_path / "ws"
    (ws / "dir" / "sub").mkdir(parents=True)
    (ws / "dir" / "a.txt").write_text("a")
    (ws / "inside-link").symlink_to(ws / "dir")  # stays inside: allowed
    (ws / "rel-inside").symlink_to("dir/a.txt")
    (ws / "out-abs").symlink_to(outside)  # absolute target outside
    (ws / "out-rel").symlink_to("../outside/secret.txt")  # relative target outside
    (ws / "dir" / "up").symlink_to("../..")  # the workspace's parent
    (ws / "root").symlink_to("/")
    (ws / "loop1").symlink_to("loop2")
    (ws / "loop2").symlink_to("loop1")
    (ws / "dangling-out").symlink_to(tmp_path / "outside" / "nope")
    return ws


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        ("..", "'..'"),
        ("../x", "'..'"),
        ("dir/../../x", "'..'"),
        ("dir/..", "'..'"),
        ("/etc/passwd", "absolute"),
        ("//server/share", "absolute"),
        ("~/x", "absolute"),
        ("C:/Windows", "absolute"),
        ("c:x", "absolute"),
        ("a\x00b", "NUL"),
        ("dir\\..\\..\\x", "backslash"),
        ("..\\x", "backslash"),
        ("", "empty"),
        ("   ", "empty"),
        (".", "workspace itself"),
        ("./", "workspace itself"),
        ("out-abs/secret.txt", "leaves"),
        ("out-abs", "leaves"),
        ("out-rel", "leaves"),
        ("dir/up/outside/secret.txt", "leaves"),
        ("root/etc/passwd", "leaves"),
        ("dangling-out", "leaves"),
        ("loop1", "loop"),
    ],
)
def test_refused_paths(workspace: Path, rel: str, reason: str) -> None:
    with pytest.raises(PathRefused) as err:
        disk.resolve_workspace_path(workspace, rel)
    assert reason in str(err.value)
    assert err.value.status == 400


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        ("dir/a.txt", "dir/a.txt"),
        ("./dir//a.txt", "dir/a.txt"),
        ("new/file.txt", "new/file.txt"),
        ("inside-link/a.txt", "dir/a.txt"),
        ("rel-inside", "dir/a.txt"),
        ("..hidden", "..hidden"),
        ("dir/...", "dir/..."),
    ],
)
def test_allowed_paths(workspace: Path, rel: str, expected: str) -> None:
    assert disk.resolve_workspace_path(workspace, rel) == workspace.resolve() / expected


def test_workspace_files_skips_symlinks(workspace: Path) -> None:
    assert disk.workspace_files(workspace) == ["dir/a.txt"]
    assert disk.workspace_files(workspace / "missing") == []


SEGMENTS = st.sampled_from(
    [
        "..", ".", "", "a", "dir", "sub", "a.txt", "out-abs", "out-rel", "up", "root", "loop1", "inside-link",
        "rel-inside", "dangling-out", "secret.txt", "outside", "etc", "C:", "c:", "~", "\\", "..\\", "\x00", " ",
        "%2e%2e", "\u2025", "\uff0e\uff0e", "ws",
    ]
)
PATHS = st.one_of(
    st.lists(SEGMENTS, max_size=8).map("/".join),
    st.lists(SEGMENTS, max_size=8).map(lambda parts: "/" + "/".join(parts)),
    st.text(max_size=40),
    st.text(alphabet="./\\:~\x00ab", max_size=30),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rel=PATHS)
def test_no_generated_path_resolves_outside_the_workspace(workspace: Path, rel: str) -> None:
    base = os.path.realpath(workspace)
    try:
        resolved = disk.resolve_workspace_path(workspace, rel)
    except PathRefused:
        return
    # Checked independently of the implementation: the fully resolved path is the workspace or below it.
    real = os.path.realpath(resolved)
    assert real == base or real.startswith(base + os.sep), (rel, real)
    assert str(resolved) == real


# ---------------------------------------------------------------- beneath the workspace (README "Security")


@pytest.fixture(params=["openat2", "walk"])
def fs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> object:
    """Each test runs with the kernel's openat2 and with the per-component O_NOFOLLOW walk."""
    from shared.storage import workspace_fs

    if request.param == "openat2":
        if not workspace_fs.OPENAT2:
            pytest.skip("openat2 is not available on this kernel")
    else:
        monkeypatch.setattr(workspace_fs, "OPENAT2", False)
    return workspace_fs


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two sessions' workspaces and a directory outside both."""
    ws, other, outside = tmp_path / "a" / "workspace", tmp_path / "b" / "workspace", tmp_path / "outside"
    for d in (ws, other, outside):
        d.mkdir(parents=True)
    (other / "secret.txt").write_bytes(b"B's secret")
    (outside / "passwd").write_bytes(b"root:x")
    return ws, other, outside


def test_links_out_of_the_workspace_are_never_followed(fs, layout) -> None:
    ws, other, outside = layout
    os.symlink(outside, ws / "abs")  # absolute, as `ln -s /…` in a command
    os.symlink("../../outside", ws / "up")  # relative, climbing out
    os.symlink(other, ws / "peer")  # another session's workspace
    os.symlink(other / "secret.txt", ws / "peer-file")
    os.symlink("loop", ws / "loop")
    for rel in ("abs/passwd", "up/passwd", "peer/secret.txt", "peer-file", "loop", "loop/x"):
        with pytest.raises(PathRefused):
            fs.read_bytes(ws, rel)
    for rel in ("abs/new", "up/new", "peer/secret.txt", "peer/new", "abs/deep/new", "loop/x"):
        with pytest.raises(PathRefused):
            fs.write_bytes(ws, rel, b"pwned")
    assert sorted(p.name for p in outside.iterdir()) == ["passwd"]
    assert (other / "secret.txt").read_bytes() == b"B's secret" and sorted(p.name for p in other.iterdir()) == ["secret.txt"]
    # The link itself as the final name: the write replaces the link, never writes through it.
    assert fs.write_bytes(ws, "peer-file", b"mine") == "peer-file"
    assert not (ws / "peer-file").is_symlink() and (other / "secret.txt").read_bytes() == b"B's secret"


def test_links_that_stay_inside_are_followed(fs, layout) -> None:
    ws, _, _ = layout
    fs.write_bytes(ws, "v2/deck.md", b"# v2")
    os.symlink("v2", ws / "current")
    os.symlink("sub/../v2/deck.md", ws / "latest.md")
    (ws / "sub").mkdir()
    assert fs.read_bytes(ws, "current/deck.md") == b"# v2"
    assert fs.read_bytes(ws, "latest.md") == b"# v2"
    fs.write_bytes(ws, "current/deck.md", b"# v3")
    assert (ws / "v2" / "deck.md").read_bytes() == b"# v3"


def test_write_refusals_are_4xx_and_touch_nothing(fs, layout) -> None:
    from shared.storage.disk import Conflict, NotFound

    ws, _, _ = layout
    fs.write_bytes(ws, "dir/file.txt", b"x")
    with pytest.raises(Conflict, match="is a directory") as exc:
        fs.write_bytes(ws, "dir", b"y")  # EISDIR
    assert exc.value.status == 409
    with pytest.raises(Conflict, match="parent") as exc:
        fs.write_bytes(ws, "dir/file.txt/child", b"y")  # ENOTDIR
    with pytest.raises(PathRefused, match="255"):
        fs.write_bytes(ws, "n" * 256, b"y")  # ENAMETOOLONG, refused before any I/O
    assert fs.write_bytes(ws, "n" * 255, b"y") == "n" * 255  # the whole NAME_MAX: no suffix is added
    with pytest.raises(PathRefused, match="must not end with '/'"):
        fs.write_bytes(ws, "name/", b"y")
    with pytest.raises(NotFound):
        fs.write_bytes(ws, "dir/absent.txt", b"y", must_exist=True)
    with pytest.raises(NotFound):
        fs.write_bytes(ws, "nodir/absent.txt", b"y", must_exist=True)
    assert not (ws / "nodir").exists() and not (ws / "name").exists()
    assert sorted(p.name for p in ws.iterdir()) == ["dir", "n" * 255]
    assert [p.name for p in (ws / "dir").iterdir()] == ["file.txt"]  # no temp file left anywhere


def test_names_are_utf8_and_nfc(fs, layout) -> None:
    import unicodedata

    ws, _, _ = layout
    nfc, nfd = unicodedata.normalize("NFC", "café.md"), unicodedata.normalize("NFD", "café.md")
    assert nfc != nfd
    assert fs.write_bytes(ws, nfd, b"one") == nfc
    fs.write_bytes(ws, nfc, b"two")
    assert [p.name for p in ws.iterdir()] == [nfc] and fs.read_bytes(ws, nfd) == b"two"
    with pytest.raises(PathRefused, match="UTF-8"):
        fs.write_bytes(ws, b"bad\xff.md".decode("utf-8", "surrogateescape"), b"x")
    with pytest.raises(PathRefused, match="control"):
        fs.write_bytes(ws, "line\nbreak", b"x")


def test_read_refuses_fifos_without_hanging(fs, layout) -> None:
    from shared.storage.disk import Conflict

    ws, _, _ = layout
    os.mkfifo(ws / "pipe")
    with pytest.raises(Conflict, match="not a regular file"):
        fs.read_bytes(ws, "pipe")


def test_a_racing_swap_of_a_directory_for_a_link_never_lets_a_write_out(fs, layout) -> None:
    """A sandboxed command swapping `d` between a directory and a link to outside while writes run."""
    import shutil
    import threading
    import time

    from shared.storage.disk import DiskError

    ws, other, outside = layout
    stop = threading.Event()

    def swapper() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            target = outside if n % 2 else other
            steps = (
                lambda: (ws / "d").mkdir(),  # a real directory: a writer may begin its walk here
                lambda: os.rename(ws / "d", ws / "d.old"),
                lambda: os.symlink(target, ws / "d"),  # noqa: B023 - swapped for a link out
                lambda: os.unlink(ws / "d"),
                lambda: shutil.rmtree(ws / "d.old"),
            )
            for step in steps:
                with contextlib.suppress(OSError):
                    step()

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    outcomes: dict[str, int] = {}
    try:
        # At least 400 writes, and on until one met the link (a loaded machine may schedule the
        # swapper thread rarely), within 30 s.
        deadline, i = time.monotonic() + 30, 0
        while i < 400 or (not outcomes.get("PathRefused") and time.monotonic() < deadline):
            i += 1
            try:
                fs.write_bytes(ws, f"d/f{i}.txt", b"escape?")
                outcomes["written"] = outcomes.get("written", 0) + 1
            except (DiskError, FileNotFoundError) as exc:
                outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
            with contextlib.suppress(DiskError, OSError):
                fs.read_bytes(ws, "d/passwd")
                raise AssertionError("read through a link out of the workspace")
    finally:
        stop.set()
        t.join(5)
    assert sorted(p.name for p in outside.iterdir()) == ["passwd"], outcomes
    assert sorted(p.name for p in other.iterdir()) == ["secret.txt"], outcomes
    assert outcomes.get("PathRefused", 0) > 0, outcomes  # the race was really run against a link


# ---------------------------------------------------------------- the workspace quota (README "Security")


def test_quota_refuses_growth_with_507_and_writes_nothing(tmp_path: Path) -> None:
    from shared.storage import workspace_fs
    from shared.storage.quota import QuotaExceeded, WorkspaceQuota, workspace_usage

    ws = tmp_path / "workspace"
    quota = WorkspaceQuota(max_bytes=100, max_files=3)
    workspace_fs.write_bytes(ws, "a.txt", b"x" * 60, quota=quota)
    with pytest.raises(QuotaExceeded, match="100 bytes, 3 files") as exc:
        workspace_fs.write_bytes(ws, "deep/dir/b.txt", b"y" * 41, quota=quota)
    assert exc.value.status == 507
    assert not (ws / "deep").exists()  # not even the directories
    workspace_fs.write_bytes(ws, "a.txt", b"x" * 100, quota=quota)  # replacing counts the old size
    workspace_fs.write_bytes(ws, "b", b"", quota=quota)
    workspace_fs.write_bytes(ws, "c", b"", quota=quota)
    with pytest.raises(QuotaExceeded, match="4 files"):
        workspace_fs.write_bytes(ws, "d", b"", quota=quota)
    (ws / "big.bin").write_bytes(b"z" * 500)  # a command overflowed it: shrinking writes still pass
    workspace_fs.write_bytes(ws, "a.txt", b"", quota=quota)
    with pytest.raises(QuotaExceeded):
        workspace_fs.write_bytes(ws, "a.txt", b"1", quota=quota)
    usage = workspace_usage(ws, quota)
    assert (usage.bytes, usage.files) == (500, 4)
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt", "b", "big.bin", "c"]


def test_usage_counts_links_never_follows_them_and_stops_at_the_entry_quota(tmp_path: Path) -> None:
    from shared.storage.quota import WorkspaceQuota, workspace_usage

    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "huge").write_bytes(b"o" * 10_000)
    (ws / "sub" / "f").write_bytes(b"1234")
    os.symlink(outside, ws / "out")
    os.symlink(outside / "huge", ws / "huge")
    roomy = WorkspaceQuota(max_bytes=10**9, max_files=10**6, max_entries=10**6)
    usage = workspace_usage(ws, roomy)
    assert (usage.bytes, usage.files, usage.entries, usage.complete) == (4, 3, 4, True)  # the directory counts
    for i in range(20):
        (ws / f"n{i}").write_bytes(b"")
    few_files = WorkspaceQuota(max_bytes=10**9, max_files=5)
    assert workspace_usage(ws, few_files).files == 23 and workspace_usage(ws, few_files).over(few_files)
    few_entries = WorkspaceQuota(max_bytes=10**9, max_files=10**6, max_entries=5)
    capped = workspace_usage(ws, few_entries)  # the walk stops past the entry quota
    assert capped.entries == 6 and not capped.complete and capped.over(few_entries)
    assert workspace_usage(tmp_path / "absent", roomy).files == 0


async def test_unsynced_append_is_readable_and_its_sync_survives_a_cancelled_caller(tmp_path: Path) -> None:
    """The lines are in the file once `append_unsynced` returns; a caller cancelled while the fsync
    runs in its thread leaves them there, and the file is closed once the fsync is done."""
    import asyncio

    from shared.storage.disk import append_unsynced, iter_jsonl, sync_and_close
    path = tmp_path / "t.jsonl"
    fh = append_unsynced(path, [{"n": 1}, {"n": 2}])
    assert [r["n"] for r in iter_jsonl(path)] == [1, 2]
    task = asyncio.ensure_future(sync_and_close(fh))
    await asyncio.sleep(0)  # the task ran up to its fsync
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    for _ in range(100):
        if fh.closed:
            break
        await asyncio.sleep(0.01)
    assert fh.closed
    await sync_and_close(append_unsynced(path, [{"n": 3}]))
    assert [r["n"] for r in iter_jsonl(path)] == [1, 2, 3]
