"""Untrusted text made unable to read as a trusted block (docs/architecture.md "Trust boundaries").

User-authored text and tool results reach the model with every reserved tag opening
(`shared/reserved_tags.py` `RESERVED_TAG_RE`: `<tag`, `</tag`, any case, whitespace allowed after the
`<` and the `/`) rewritten: its `<` becomes `&lt;`, so `<system_guidance>` arrives as
`&lt;system_guidance>`. Only those openings change; every other character, `<` and `&` included, is
left as typed, so code, HTML and maths in user text read as before. The rewrite is idempotent (its
output holds no reserved tag opening, and `&lt;` is not one) and deterministic, so a transcript
converts to the same request bytes every time (the provider's prefix cache).

Applied where text leaves the harness for a model (the runtime's request conversion, the compaction
summarizer's prompt); the transcript keeps what was typed.
"""

from __future__ import annotations

import re

from shared.reserved_tags import RESERVED_TAG_RE

ESCAPED_OPEN = "&lt;"


def _escape(match: re.Match[str]) -> str:
    return ESCAPED_OPEN + match.group(0)[1:]  # every match starts with its `<`


def neutralise(text: str) -> str:
    """`text` with the `<` of each reserved tag opening written as `&lt;`; unchanged without one."""
    return RESERVED_TAG_RE.sub(_escape, text)
