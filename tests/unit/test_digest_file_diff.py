"""File digests: line diff for text, dirty marker for binaries and unknown bases."""

from __future__ import annotations

from services.digest.file_diff import DIRTY_TEXT, file_digest

BRIEF = "\n".join(f"<line n='{i}'>text {i}</line>" for i in range(1, 40)).encode()


def changed(old: bytes | None, new: bytes | None) -> tuple[str, str]:
    """The digest of a change (never None: something changed)."""
    digest = file_digest(old, new)
    assert digest is not None
    return digest


def test_small_text_change_is_an_inline_line_diff() -> None:
    new = BRIEF.replace(b"text 5<", b"audience: engineers<")
    level, text = changed(BRIEF, new)
    assert level == "inline"
    assert "-<line n='5'>text 5</line>" in text and "+<line n='5'>audience: engineers</line>" in text
    assert "@@" in text


def test_large_text_change_is_scoped_by_line_ranges() -> None:
    lines = BRIEF.decode().splitlines()
    for i in (2, 3, 20):
        lines[i] = "changed " + "z" * 800
    level, text = changed(BRIEF, "\n".join(lines).encode())
    assert level == "scoped"
    assert text.startswith("Changed lines: 3-4, 21 (the file now has 39 lines).")


def test_binary_unknown_deleted_and_identical() -> None:
    level, text = changed(b"\x89PNG\x00\x01", b"\x89PNG\x00\x02\x03")
    assert level == "dirty" and "binary" in text
    assert file_digest(None, b"x") == ("dirty", DIRTY_TEXT)
    assert file_digest(b"x", None) == ("dirty", "The file was deleted.")
    assert file_digest(BRIEF, BRIEF) is None
