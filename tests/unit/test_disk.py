"""shared/disk.py: atomic writes, torn-tolerant JSON Lines, size limits, workspace path safety."""

from __future__ import annotations

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

from shared import disk
from shared.disk import PathRefused, TooLarge

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
        from shared import disk

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
