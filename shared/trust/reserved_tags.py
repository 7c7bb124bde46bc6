"""The tag names the harness reserves for trusted blocks, and the one rule that says where text opens
or closes one (docs/architecture.md "Trust boundaries").

A trusted block (an injection or an anchor the harness writes) is the only place these tags may
appear unescaped in what the model reads. The builder of trusted blocks escapes them inside every
interpolated value (shared/trust/trusted_blocks.py), and user-authored text and tool results are neutralised
(shared/trust/neutralise.py): both find the openings with `TAG_RULE` and write each one's first character
with `escape_opener`, so the two sides agree on one set of names and one way of reading them.

The rule reads a normalised copy of the text, one character at a time, the way a reader (or a model)
would see it: invisible characters are skipped (format characters: zero-width spaces and joiners, the
soft hyphen, bidi marks, overrides and isolates, U+180E, tag characters, the BOM; combining marks,
the CGJ and variation selectors; control characters and the Hangul fillers), and each character is
folded to what it looks like: NFKD (full-width and compatibility forms, `≮` as `<` and its mark),
case folding, and Unicode's confusables for `<`, `/`, `-` and the Latin letters
(shared/trust/tag_confusables.py: Cyrillic `ѕ`, Greek `ο`, `‹`, `﹤`, `〈`, `⟨`...); `-` reads as `_`. An
opening is a `<` look-alike, optional whitespace, an optional `/` look-alike, optional whitespace, a
reserved name, then anything that is not a name character ([a-z0-9_] after folding) or the end.

A character reference a reader may decode to `<` opens one as a `<` does: `&LT;`, `&lt` without its
semicolon, `&#60;`, `&#x3c;` (any case, leading zeros, semicolon or not). Its escape writes the `&`
as `&amp;` (`&amp;#60;system_update` reads as text after one decoding too). The one spelling that
does not open a tag is `&lt;` itself: it is what the escape of a raw `<` writes, and the model is told
that a tag written with it is a quotation (services/runtime/prompts/transport.txt).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from shared.contracts.records.injection import INJECTION_KINDS
from shared.trust.tag_confusables import LOOKALIKES

# Anchors and wrappers the runtime and the compaction service render around harness-owned content.
ANCHOR_TAGS: tuple[str, ...] = (
    "todo_state",
    "active_skill",
    "active_knowledge",
    "summary",
    "run_aborted",
    "session_rewound",
    "checklist_progress",
    "knowledge_hints",
    "workspace_rule",
    "skill",
    "available_skills",
    "read-files",
    "modified-files",
    "conversation",
    "previous-summary",
    "attachments",
    # Client- or model-authored text quoted as data inside a trusted block (shared/trust/trusted_blocks.py).
    "quoted",
)

RESERVED_TAGS: tuple[str, ...] = (*INJECTION_KINDS, *ANCHOR_TAGS)

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
# Default-ignorable code points outside the categories `_ignorable` drops: the Hangul fillers and
# the unassigned ranges Unicode reserves as ignorable (a newer reader may render them as nothing).
_IGNORABLE_EXTRA = frozenset("\u115f\u1160\u3164\uffa0\u2065")
_IGNORABLE_RANGES = ((0xFFF0, 0xFFF8), (0xE0000, 0xE0FFF))
_CONFUSED: dict[str, str] = {}
for _target, _chars in LOOKALIKES.items():
    for _char in _chars:
        _CONFUSED[_char] = "".join(sorted(set(_CONFUSED.get(_char, "") + _target)))


def _ignorable(c: str) -> bool:
    cat = unicodedata.category(c)
    if cat in ("Cf", "Mn", "Me", "Mc") or (cat == "Cc" and not c.isspace()) or c in _IGNORABLE_EXTRA:
        return True
    cp = ord(c)
    return any(lo <= cp <= hi for lo, hi in _IGNORABLE_RANGES)


def _strip(text: str) -> str:
    return "".join(c for c in text if not _ignorable(c))


def _alternatives(d: str) -> set[str]:
    """What one visible character may read as: its ASCII fold, or its look-alikes and itself."""
    if d.isascii():
        return {"_" if d == "-" else d.lower()}
    return {*_CONFUSED.get(d, ""), d}


@lru_cache(maxsize=65536)
def fold(c: str) -> tuple[str, ...]:
    """What one character reads as: a position per character it stands for (none if invisible), each
    the string of alternatives it may be (`ӏ` may be `i` or `l`, or itself). Compatibility forms,
    case and marks are folded (NFKD, case folding, NFKD again); a character that stays one character
    also keeps the look-alikes of its intermediate forms (`ϲ` is a `c`, its NFKD `ς` folds to `σ`)."""
    if c.isascii() and not (unicodedata.category(c) == "Cc" and not c.isspace()):
        return ("_",) if c == "-" else (c.lower(),)
    if _ignorable(c):
        return ()
    nfkd = unicodedata.normalize("NFKD", c)
    final = _strip(unicodedata.normalize("NFKD", nfkd.casefold()))
    if len(final) != 1:
        return tuple("".join(sorted(_alternatives(d))) for d in final)
    alts: set[str] = set()
    for form in {c, _strip(nfkd), _strip(c.casefold()), final}:
        if len(form) == 1:
            alts |= _alternatives(form)
    return ("".join(sorted(alts)),)


def _trie() -> tuple[list[dict[str, int]], dict[int, str]]:
    """The reserved names (`-` as `_`) as a trie: each node's edges by character, and the node each
    name ends at."""
    edges: list[dict[str, int]] = [{}]
    ends: dict[int, str] = {}
    for tag in RESERVED_TAGS:
        node = 0
        for ch in tag.replace("-", "_"):
            if ch not in edges[node]:
                edges.append({})
                edges[node][ch] = len(edges) - 1
            node = edges[node][ch]
        ends[node] = tag
    return edges, ends


_EDGES, _ENDS = _trie()
# Characters that may read as `<`: a character class finds the candidates in long text at C speed.
OPENERS = frozenset(["<", *(c for c, alts in _CONFUSED.items() if "<" in alts)]) | frozenset(
    # Their NFKD is `<` or a look-alike: `≮` (`<` and a mark), `﹤`, `＜`, vertical `︽` and `︿`.
    chr(cp) for cp in (0x226E, 0xFE64, 0xFF1C, 0xFE3D, 0xFE3F))
_OPENER_CLASS = "[" + re.escape("".join(sorted(OPENERS))) + "]"
_OPENER_RE = re.compile(_OPENER_CLASS)
_SKIPPED_ASCII = r"[\x00-\x08\x0e-\x1b\x7f]"  # the ASCII controls `fold` drops (not whitespace)


def _spelled(name: str) -> str:
    return "".join("[-_]" if ch in "-_" else re.escape(ch) for ch in name)


# Speed, not meaning (the walk in `_opening_at` is the rule): an opener is a candidate unless the
# text after it cannot begin a reserved name: past whitespace, slashes and common invisible characters
# (`_INVISIBLE`, each one `fold` drops: tests/unit/test_tag_rule.py checks), its next three visible
# characters are printable ASCII and not, each, a letter some name has in that place. Any other
# character there (a look-alike, a rarer invisible one) sends the opener to the walk.
_INVISIBLE = ("\x00-\x08\x0e-\x1b\x7f\u00ad\u0300-\u036f\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
              "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0"
              "\U000e0000-\U000e0fff")
_INV = "[" + _INVISIBLE + "]*"
# Openers that read as nothing else a name could start with (another `<`) are not unusual either.
_PLAIN_OPENERS = "".join(sorted(c for c in OPENERS if not c.isascii() and all(
    a == "<" or not (a.isascii() or a.isspace()) for alts in fold(c) for a in alts)))
_UNUSUAL = "[^\\x00-\\x7f" + _INVISIBLE + re.escape(_PLAIN_OPENERS) + "]"


def _letters(k: int) -> str:
    chars = {c for t in RESERVED_TAGS if len(t) > k for c in (t[k], t[k].upper())}
    return "[" + re.escape("".join(sorted(chars | ({"-", "_"} if chars & {"-", "_"} else set())))) + "]"


_CANDIDATE_RE = re.compile(_OPENER_CLASS + "(?=(?:[\\s/]|[" + _INVISIBLE + "])*(?:" + _UNUSUAL + "|" + _letters(0)
                           + _INV + "(?:" + _UNUSUAL + "|" + _letters(1) + _INV + "(?:" + _UNUSUAL + "|"
                           + _letters(2) + "))))")
# The walk's answer for an opening spelled in plain ASCII (`<`, whitespace, one `/`, a name, then an
# ASCII character that is no name character, or the end).
_ASCII_TAG_RE = re.compile(r"<\s*(/)?\s*(" + "|".join(_spelled(t) for t in sorted(RESERVED_TAGS, key=len, reverse=True))
                           + r")(?![A-Za-z0-9_-])", re.IGNORECASE | re.ASCII)
_BY_SPELLING = {t.replace("-", "_"): t for t in RESERVED_TAGS}
# Where the ASCII reading stops: `<`, whitespace, one `/`, whitespace, the longest start of a name.
_ASCII_PREFIX_RE = re.compile(r"<\s*/?\s*(?:" + "|".join(sorted({_spelled(t[:k]) for t in RESERVED_TAGS
                                                                   for k in range(1, len(t) + 1)}, key=len, reverse=True))
                              + ")?", re.IGNORECASE | re.ASCII)

State = tuple[int, int, bool]  # (0 before the slash, 1 after it, 2 in the name; trie node; closing)


@dataclass(frozen=True)
class TagMatch:
    """A reserved tag opening (or closing) in the original text: `start` is its `<` look-alike, `end`
    where its name ends; `tag` the reserved name it reads as."""

    text: str
    start_: int
    end_: int
    tag: str
    closing: bool

    def start(self) -> int:
        return self.start_

    def end(self) -> int:
        return self.end_

    def group(self) -> str:
        return self.text[self.start_:self.end_]

    def canonical(self) -> str:
        """`<tag` or `</tag`, as the harness spells it."""
        return ("</" if self.closing else "<") + self.tag


NOT_AN_OPENING = TagMatch("", 0, 0, "", False)


def _step(states: set[State], alts: str) -> tuple[set[State], tuple[str, bool] | None]:
    """One folded position (its alternatives): the states after it, or the (name, closing) a state
    ends here because a character that is no name character follows a complete name."""
    nxt: set[State] = set()
    for phase, node, closing in states:
        for a in alts:
            if phase == 2:
                if a in _NAME_CHARS:
                    if a in _EDGES[node]:
                        nxt.add((2, _EDGES[node][a], closing))
                elif node in _ENDS:
                    return nxt, (_ENDS[node], closing)
            elif a.isspace():
                nxt.add((phase, node, closing))
            elif a == "/" and phase == 0:
                nxt.add((1, 0, True))
            elif a in _EDGES[0]:
                nxt.add((2, _EDGES[0][a], closing))
    return nxt, None


def _complete(states: set[State]) -> tuple[str, bool] | None:
    """The reserved name a state has read in full, if one has."""
    for phase, node, closing in sorted(states):
        if phase == 2 and node in _ENDS:
            return _ENDS[node], closing
    return None


def _opening_at(text: str, i: int, after: int | None = None) -> TagMatch | None:
    """The reserved tag that the `<` look-alike at `i` (or the reference to `<` from `i` to `after`)
    opens, if it does. A complete name ends at a character that is no name character, at the end of
    the text, and (the cautious reading: a reader may take it for a break) at an invisible one."""
    states: set[State] = {(0, 0, False)}
    for j in range(i + 1 if after is None else after, len(text)):
        folded = fold(text[j])
        if not folded and (done := _complete(states)) is not None:
            return TagMatch(text, i, j, *done)
        for alts in folded:
            states, ended = _step(states, alts)
            if ended is not None:
                return TagMatch(text, i, j, *ended)
            if not states:
                return None
    done = _complete(states)
    return None if done is None else TagMatch(text, i, len(text), *done)


def _ascii_opening_at(text: str, i: int) -> TagMatch | None:
    """The walk's answer where the text it reads is plain ASCII: a match, or NOT_AN_OPENING; None
    where the walk must read it (a look-alike, an invisible or a non-ASCII character on the way)."""
    m = _ASCII_TAG_RE.match(text, i)
    if m is not None:
        if m.end() < len(text) and not text[m.end()].isascii():
            return None
        return TagMatch(text, i, m.end(), _BY_SPELLING[m.group(2).lower().replace("-", "_")], m.group(1) is not None)
    p = _ASCII_PREFIX_RE.match(text, i)
    if p is None:  # not `<`: a look-alike
        return None
    stop = text[p.end()] if p.end() < len(text) else ""
    return NOT_AN_OPENING if stop == "" or (stop.isascii() and re.match(_SKIPPED_ASCII, stop) is None) else None


# A character reference to `<` other than `&lt;` (the module docstring): named (HTML's `lt` and `LT`,
# without a semicolon too; any case here), decimal or hexadecimal with any leading zeros.
_REFERENCE_RE = re.compile(r"&(?!lt;)(?:(?i:lt);?|#0*60(?![0-9]);?|#[xX]0*3[cC](?![0-9a-fA-F]);?)")


class TagRule:
    """Where text opens or closes a reserved tag (the module docstring's rule)."""

    def finditer(self, text: str) -> Iterator[TagMatch]:
        refs = _REFERENCE_RE.finditer(text) if "&" in text else iter(())
        ref = next(refs, None)
        for m in _CANDIDATE_RE.finditer(text):
            while ref is not None and ref.start() < m.start():
                if (found := _opening_at(text, ref.start(), ref.end())) is not None:
                    yield found
                ref = next(refs, None)
            i = m.start()
            found = _ascii_opening_at(text, i) if text[i] == "<" and text[i + 1:i + 2].isascii() else None
            if found is None:
                found = _opening_at(text, i)
            if found is not None and found is not NOT_AN_OPENING:
                yield found
        while ref is not None:
            if (found := _opening_at(text, ref.start(), ref.end())) is not None:
                yield found
            ref = next(refs, None)

    def search(self, text: str) -> TagMatch | None:
        return next(self.finditer(text), None)

    def match(self, text: str) -> TagMatch | None:
        """An opening at the very start of `text`."""
        if text.startswith("&"):
            ref = _REFERENCE_RE.match(text)
            return None if ref is None else _opening_at(text, 0, ref.end())
        if not (text and text[0] in OPENERS):
            return None
        found = _ascii_opening_at(text, 0)
        if found is None:
            found = _opening_at(text, 0)
        return None if found is NOT_AN_OPENING else found

    def starts(self, text: str) -> list[int]:
        return [m.start() for m in self.finditer(text)]


TAG_RULE = TagRule()


def escape_opener(c: str) -> str:
    """How the first character of a reserved tag opening is written where it must not open one:
    `&lt;` for `<`, `&amp;` for the `&` of a character reference to `<`, a hexadecimal character
    reference for a look-alike (reversible either way)."""
    return "&lt;" if c == "<" else "&amp;" if c == "&" else f"&#x{ord(c):X};"


def escape_openings(text: str) -> str:
    """`text` with the first character of every reserved tag opening written by `escape_opener`."""
    starts = TAG_RULE.starts(text) if _OPENER_RE.search(text) or "&" in text else []
    if not starts:
        return text
    parts, at = [], 0
    for start in starts:
        parts += [text[at:start], escape_opener(text[start])]
        at = start + 1
    parts.append(text[at:])
    return "".join(parts)
