"""The one rule for workspace names (shared/storage/pathnames.py; docs/architecture.md "Workspace names"):
every name a disk can hold is shown as UTF-8 text without controls, and given back exactly."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.storage.disk import PathRefused, shown_path, split_workspace_path
from shared.storage.pathnames import BadEscape, show, unshow

# Any bytes but NUL and "/" (what a name on Linux may hold).
NAMES = st.binary(min_size=1, max_size=64).filter(lambda b: b"\0" not in b and b"/" not in b)


@given(NAMES)
def test_every_name_is_shown_as_text_and_given_back(raw: bytes) -> None:
    name = os.fsdecode(raw)
    shown = show(name)
    shown.encode("utf-8")  # never a lone surrogate: JSON, pydantic and Redis take it
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in shown)
    assert os.fsencode(unshow(shown)) == raw


@given(NAMES, NAMES)
def test_two_names_are_never_shown_alike(a: bytes, b: bytes) -> None:
    if a != b:
        assert show(os.fsdecode(a)) != show(os.fsdecode(b))


@pytest.mark.parametrize("text", ["a\\", "a\\q", "\\x41", "\\x2F", "\\x00", "\\xe9", "\\u00e9"])
def test_only_the_rules_escapes_are_taken(text: str) -> None:
    with pytest.raises(BadEscape):
        unshow(text)
    with pytest.raises(PathRefused):
        split_workspace_path(text)


def test_a_shown_path_opens_the_bytes_and_writes_never_make_one() -> None:
    parts = split_workspace_path("caf\\xE9/r\\xE9sum\\xE9.txt")
    assert [os.fsencode(p) for p in parts] == [b"caf\xe9", b"r\xe9sum\xe9.txt"]
    assert shown_path(parts) == "caf\\xE9/r\\xE9sum\\xE9.txt"
    assert split_workspace_path("caf\\xE9", for_write=True, escapes=True) == ["caf\udce9"]
    with pytest.raises(PathRefused, match="backslash"):
        split_workspace_path("caf\\xE9", for_write=True)
    with pytest.raises(PathRefused, match="256 bytes"):
        split_workspace_path("\\xE9" * 256)  # 256 bytes on the disk, 1,024 characters shown
