"""Workspace names: bytes on the disk, text everywhere else, one reversible rule between the two
(docs/architecture.md "Workspace names").

A sandboxed command names files as it likes: `tar -xf` of a Latin-1 archive leaves names that are
not UTF-8, and any command can put a newline or an escape character in a name. Python reads such a
name as text with `surrogateescape` (each byte that is not UTF-8 becomes U+DC80..U+DCFF), which no
JSON encoder, pydantic model or Redis stream entry accepts. So a name read from the disk is never
sent as it is: it is *shown*, and a shown name given back (a client's GET or DELETE, the model's
`read`) is *unshown* to the name on the disk.

The shown form is the name's UTF-8 text with three escapes, all starting with a backslash:

- `\\xHH` (two upper-case hex digits) for a byte that is not UTF-8 (HH from 80 to FF) and for a
  control character (01-1F, 7F): the byte itself on the disk;
- `\\\\` for a backslash in the name.

Everything else (any character of any script) is shown as it is. The rule is injective, so a
listing never shows two files under one name, and its inverse refuses any other backslash. Archives
(the export) carry the bytes themselves: a tar name is bytes, not text.
"""

from __future__ import annotations

import re

ESCAPED = re.compile(r"[\udc80-\udcff\x01-\x1f\x7f\\]")
_SHOWN_ESCAPE = re.compile(r"\\(?:x([0-9A-F]{2})|(\\)|)")


class BadEscape(ValueError):
    """A backslash in a shown name that is not one of its escapes."""


def _escape(match: re.Match[str]) -> str:
    c = match.group()
    if c == "\\":
        return "\\\\"
    code = ord(c)
    return f"\\x{code - 0xDC00 if code >= 0xDC80 else code:02X}"


def show(name: str) -> str:
    """The shown form of a name (or a "/"-separated path) read from the disk as `os` decodes it."""
    return ESCAPED.sub(_escape, name) if ESCAPED.search(name) else name


def _unescape(match: re.Match[str]) -> str:
    hexa, backslash = match.group(1), match.group(2)
    if backslash:
        return "\\"
    if hexa is None:
        raise BadEscape("a backslash in a path must start an escape: \\\\ or \\xHH (docs/architecture.md "
                        "\"Workspace names\"); other backslashes are not allowed")
    code = int(hexa, 16)
    if code >= 0x80:
        return chr(0xDC00 + code)  # the byte itself, as os.fsencode writes it back
    if code < 0x20 or code == 0x7F:
        if code == 0:
            raise BadEscape("a path cannot hold a NUL byte (\\x00)")
        return chr(code)
    raise BadEscape(f"\\x{hexa} is not an escape: the character {chr(code)!r} is written as it is")


def unshow(text: str) -> str:
    """The name on the disk (as `os` takes it) for a shown name; BadEscape for a backslash that is not
    an escape. Only what `show` writes is accepted, so one name has one shown form."""
    return _SHOWN_ESCAPE.sub(_unescape, text) if "\\" in text else text


def is_plain(name: str) -> bool:
    """Whether a name on the disk is shown as it is (valid UTF-8, no control character, no backslash)."""
    return ESCAPED.search(name) is None
