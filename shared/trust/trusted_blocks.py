"""The one builder of trusted blocks: every injection and anchor the model reads as the harness's own
words (docs/architecture.md "Trust boundaries").

A block is a reserved tag (shared/trust/reserved_tags.py) around a body. Nothing interpolated into one can
end it early or open another: attribute values are fully escaped (&, <, >, quotes, line breaks) and
always double-quoted; body text has every reserved tag opening or closing (any case, `< /x`, nested
openings) escaped with shared/trust/reserved_tags.py's one rule (`&lt;`, or a character reference for a
look-alike of `<`), plus the `&` of any such escape it already contains, so `unescape` gives the
original back exactly. Text other than the reserved tags stays as written (a file's `<div>`
reads as `<div>`, which the model edits verbatim). Harness structure inside a body (a nested element)
is a `Trusted` value made here, never a string: a `str` part is always escaped.

Text a client or the model wrote is embedded with `quoted`: attributed, inside its own `<quoted>`
element, after a harness sentence that names it as data ("The user described the change: ..."), so
the block never speaks it as the harness's instruction.

No other module formats a reserved tag: tests/unit/test_trusted_blocks_only.py scans the sources.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shared.trust.reserved_tags import RESERVED_TAGS, escape_openings

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_ATTR_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
                 "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}
# Every other character that breaks a line (vertical tab, form feed, the C1 next line, the file, group and
# record separators, the line and paragraph separators) as a hexadecimal reference too.
_ATTR_RE = re.compile("[" + re.escape("".join(_ATTR_ESCAPES)) + "\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_ATTR_UNESCAPE = re.compile(r"&(amp|lt|gt|quot|#39|#9|#10|#13|#x[0-9A-F]{1,6});")
_ATTR_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "#39": "'", "#9": "\t", "#10": "\n", "#13": "\r"}
# `&` is escaped only where it would otherwise read as one of the escapes the body uses (`&lt;`,
# `&amp;`, and the character reference shared/trust/reserved_tags.py `escape_opener` writes for a look-alike).
_BODY_AMP = re.compile(r"&(?=lt;|amp;|#x[0-9A-F]{1,6};)")
_BODY_UNESCAPE = re.compile(r"&(lt|amp|#x[0-9A-F]{1,6});")

Author = str  # who wrote quoted text: "user", "client", "model", "subagent", ...


@dataclass(frozen=True)
class Trusted:
    """A rendered element: harness structure, inserted into an enclosing body as it is."""

    text: str


Part = str | Trusted
Body = Part | Sequence[Part]
AttrValue = str | int | None


def escape_attr(value: str) -> str:
    """An attribute value with &, <, >, both quotes and line breaks as character references (and a
    look-alike of `<` that would open a reserved tag, by the one rule)."""
    return escape_openings(_ATTR_RE.sub(lambda m: _ATTR_ESCAPES.get(m.group(), f"&#x{ord(m.group()):X};"), value))


def unescape_attr(value: str) -> str:
    """The original of `escape_attr` (exactly: not HTML's rules, which remap C1 references)."""
    return _ATTR_UNESCAPE.sub(lambda m: _ATTR_NAMED.get(m.group(1)) or chr(int(m.group(1)[2:], 16)), value)


# A name a client chose that reads as one word in a harness sentence as it is.
_PLAIN_TOKEN = re.compile(r"[A-Za-z0-9_.:/@#+=~-]{1,200}")


def _one_line(text: str) -> str:
    """JSON text with the characters it leaves raw that could break or hide a line (C1 controls, the
    line and paragraph separators, format characters such as bidi overrides) as `\\u` escapes."""
    out = []
    for c in text:
        if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp"):
            cp = ord(c)
            if cp > 0xFFFF:  # JSON's surrogate pair
                cp -= 0x10000
                out.append(f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}")
            else:
                out.append(f"\\u{cp:04x}")
        else:
            out.append(c)
    return "".join(out)


def json_value(value: object) -> str:
    """A value a client or a file wrote, for a harness sentence: JSON on one line (nothing in it can
    start a line of the block; a body's reserved tags are escaped as any body text)."""
    return _one_line(json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": ")))


def token(name: str) -> str:
    """A name a client chose (a card id, a key) inside a harness sentence: as it is when it is a plain
    word, else as a one-line JSON string, so it can neither start a line nor pass for harness words."""
    return name if _PLAIN_TOKEN.fullmatch(name) else json_value(name)


def escape_text(text: str) -> str:
    """Body text in which no reserved tag can open or close (reversible with `unescape`)."""
    return escape_openings(_BODY_AMP.sub("&amp;", text))


def unescape(text: str) -> str:
    """The original of `escape_text` (one left-to-right pass: `&amp;lt;` gives back `&lt;`)."""
    return _BODY_UNESCAPE.sub(_unescape_one, text)


def _unescape_one(m: re.Match[str]) -> str:
    name = m.group(1)
    if name in ("lt", "amp"):
        return "<" if name == "lt" else "&"
    cp = int(name[2:], 16)
    return chr(cp) if cp <= 0x10FFFF else m.group(0)


def _attrs(attrs: Mapping[str, AttrValue] | None, indent: str | None = None) -> str:
    """` a="v" b="w"`, or with `indent` one attribute a line (then the line the tag ends on)."""
    out = []
    for name, value in (attrs or {}).items():
        if value is None:
            continue
        if not _NAME.fullmatch(name):
            raise ValueError(f"not an attribute name: {name!r}")
        sep = " " if indent is None else f"\n{indent}  "
        out.append(f'{sep}{name}="{escape_attr(str(value))}"')
    return "".join(out) if indent is None else "".join(out) + f"\n{indent}"


def _body(body: Body) -> str:
    parts: Sequence[Part] = [body] if isinstance(body, str | Trusted) else body
    out: list[str] = []
    run: list[str] = []  # adjacent strings escape as one: a tag split across two parts is still a tag
    for part in parts:
        if isinstance(part, Trusted):
            out.append(escape_text("".join(run)))
            run = []
            out.append(part.text)
        else:
            run.append(part)
    out.append(escape_text("".join(run)))
    return "".join(out)


def element(tag: str, attrs: Mapping[str, AttrValue] | None = None, body: Body = "", *,
            inline: bool = False, empty: bool = False, attr_indent: str | None = None) -> Trusted:
    """`<tag a="v">` body `</tag>`: on lines of their own, or `inline`, or `<tag a="v"/>` when `empty`;
    with `attr_indent`, one attribute a line, indented under the tag."""
    if not _NAME.fullmatch(tag):
        raise ValueError(f"not a tag name: {tag!r}")
    head = f"<{tag}{_attrs(attrs, attr_indent)}"
    if empty:
        return Trusted(head + "/>")
    text = _body(body)
    if inline:
        return Trusted(f"{head}>{text}</{tag}>")
    return Trusted(f"{head}>\n{text}\n</{tag}>" if text else f"{head}>\n</{tag}>")


def render(tag: str, attrs: Mapping[str, AttrValue] | None = None, body: Body = "") -> str:
    """A top-level trusted block: `tag` must be one of shared/trust/reserved_tags.py's RESERVED_TAGS."""
    if tag not in RESERVED_TAGS:
        raise ValueError(f"not a reserved tag: {tag!r}")
    return element(tag, attrs, body).text


def fragment(body: Body) -> Trusted:
    """A body without an enclosing tag (parts of a block composed in one place, wrapped in another)."""
    return Trusted(_body(body))


def ensure_block(tag: str, content: str, attrs: Mapping[str, AttrValue] | None = None) -> str:
    """`content` as a `tag` block: as it is when a producer already rendered it here (it starts with
    the tag's opening), else the bare text escaped inside a new one."""
    if re.match(rf"\s*<{re.escape(tag)}[\s/>]", content):
        return content
    return render(tag, attrs, content)


def extract(text: str, tag: str) -> tuple[str, int] | None:
    """(original body, index after its closing tag) of the first `tag` block `element` rendered (on
    lines of its own) in `text`, or None."""
    opening = re.search(rf"<{re.escape(tag)}(?:\s[^>]*)?>\n", text)
    if opening is None:
        return None
    closing = f"</{tag}>"
    if text.startswith(closing, opening.end()):
        return "", opening.end() + len(closing)
    end = text.find("\n" + closing, opening.end())
    return None if end < 0 else (unescape(text[opening.end():end]), end + 1 + len(closing))


def quoted(author: Author, text: str) -> Trusted:
    """Text `author` wrote, as data inside a trusted block: its own attributed element, escaped."""
    return element("quoted", {"author": author}, text)


def whole_quotation(text: str, author: Author) -> str | None:
    """The original text when `text` is exactly one `quoted(author, ...)` element, else None."""
    if not text.startswith(element("quoted", {"author": author}, "x").text.split("\n", 1)[0] + "\n"):
        return None
    found = extract(text, "quoted")
    return found[0] if found is not None and found[1] == len(text) else None


def lines(*parts: Part, sep: str = "\n") -> list[Part]:
    """Parts joined by line breaks (a body of several lines, some of them nested elements)."""
    out: list[Part] = []
    for i, part in enumerate(parts):
        if i:
            out.append(sep)
        out.append(part)
    return out


def artifact_update(ref: str, from_revision: int | None, to_revision: int | None, body: Body,
                    state: str | None = None) -> str:
    """The `<artifact_update>` injection (docs/integration.md "Injections"): file and deck text is
    user-controlled, so its body is escaped like any other."""
    attrs: dict[str, AttrValue] = {"ref": ref, "from_revision": from_revision, "to_revision": to_revision,
                                   "state": state}
    return render("artifact_update", attrs, body)
