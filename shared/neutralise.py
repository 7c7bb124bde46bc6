"""Untrusted text made unable to read as a trusted block (docs/architecture.md "Trust boundaries").

User-authored text and tool results reach the model with every reserved tag opening
(`shared/reserved_tags.py` `RESERVED_TAG_RE`: `<tag`, `</tag`, any case, whitespace allowed after the
`<` and the `/`) rewritten: its `<` becomes `&lt;`, so `<system_guidance>` arrives as
`&lt;system_guidance>`. Only those openings change; every other character, `<` and `&` included, is
left as typed, so code, HTML and maths in user text read as written. The rewrite is idempotent (its
output holds no reserved tag opening, and `&lt;` is not one) and deterministic, so a transcript
converts to the same request bytes every time (the provider's prefix cache).

Applied where text leaves the harness for a model (the runtime's request conversion, the compaction
summarizer's prompt); the transcript keeps what was typed.
"""

from __future__ import annotations

import re

from shared.reserved_tags import RESERVED_TAG_RE, RESERVED_TAGS

ESCAPED_OPEN = "&lt;"
# Characters `re.IGNORECASE` equates with an ASCII letter that `str.lower` does not turn into it
# (U+0130 also grows when lowercased); tests/unit/test_neutralise.py derives the list again.
CASE_EXCEPTIONS = ("\u0130", "\u0131", "\u017f")

# RESERVED_TAG_RE's matches, found case-sensitively in a lowercased copy of the text: about 4x faster
# on markup-heavy tool output, where the case-insensitive alternation is tried at every `<`. Valid
# while the shared pattern spells its names in lowercase ASCII; otherwise only the pattern itself.
_LOWERED_RE = (re.compile(RESERVED_TAG_RE.pattern, RESERVED_TAG_RE.flags & ~re.IGNORECASE)
               if all(t.isascii() and t == t.lower() for t in RESERVED_TAGS) else None)


def _escape(match: re.Match[str]) -> str:
    return ESCAPED_OPEN + match.group(0)[1:]  # every match starts with its `<`


def neutralise(text: str) -> str:
    """`text` with the `<` of each reserved tag opening written as `&lt;`; unchanged without one."""
    if "<" not in text:
        return text
    lowered = text.lower()
    if _LOWERED_RE is None or len(lowered) != len(text) or any(c in text for c in CASE_EXCEPTIONS):
        return RESERVED_TAG_RE.sub(_escape, text)  # positions would not line up: the shared pattern itself
    starts = [m.start() for m in _LOWERED_RE.finditer(lowered)]
    if not starts:
        return text
    parts, at = [], 0
    for start in starts:
        parts += [text[at:start], ESCAPED_OPEN]
        at = start + 1
    parts.append(text[at:])
    return "".join(parts)
