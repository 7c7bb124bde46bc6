"""Untrusted text made unable to read as a trusted block (docs/architecture.md "Trust boundaries").

User-authored text and tool results reach the model with every reserved tag opening rewritten
(`shared/trust/reserved_tags.py` `TAG_RULE`: `<tag`, `</tag`, read on a normalised copy, so invisible
characters, look-alikes of `<`, `/` and of the name's letters, full-width forms and `-` for `_` all
count): its `<` becomes `&lt;` (a look-alike of `<` a character reference), so `<system_guidance>`
arrives as `&lt;system_guidance>`. Only those openings change; every other character, `<` and `&`
included, is left as typed, so code, HTML and maths in user text read as written. The rewrite is
idempotent (its output holds no reserved tag opening, and `&lt;` is not one) and deterministic, so a
transcript converts to the same request bytes every time (the provider's prefix cache). The builder of
trusted blocks escapes its bodies with the same rule (shared/trust/trusted_blocks.py `escape_text`).

Applied where text leaves the harness for a model (the runtime's request conversion, the compaction
summarizer's prompt); the transcript keeps what was typed.
"""

from __future__ import annotations

from shared.trust.reserved_tags import escape_openings

ESCAPED_OPEN = "&lt;"


def neutralise(text: str) -> str:
    """`text` with the first character of each reserved tag opening escaped; unchanged without one."""
    return escape_openings(text)
