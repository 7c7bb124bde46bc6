"""The tag names the harness reserves for trusted blocks (docs/architecture.md "Trust boundaries").

A trusted block (an injection or an anchor the harness writes) is the only place these tags may
appear unescaped in what the model reads. The builder of trusted blocks escapes them inside every
interpolated value, and user-authored text and tool results are neutralised against the same list, so
the two sides agree on one set of names.
"""

from __future__ import annotations

import re

from shared.contracts.injection import INJECTION_KINDS

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
    # Client- or model-authored text quoted as data inside a trusted block (shared/trusted_blocks.py).
    "quoted",
)

RESERVED_TAGS: tuple[str, ...] = (*INJECTION_KINDS, *ANCHOR_TAGS)

# Whitespace and the invisible format characters a reader skips (zero-width spaces and joiners,
# direction marks, the BOM): `<\u200bsystem_note>` still reads as the tag.
_GAP = r"[\s\u200b-\u200f\u2060\ufeff]*"

# `<tag`, `</tag` with any case and optional gaps around the slash, followed by a delimiter.
RESERVED_TAG_RE = re.compile(
    "<" + _GAP + "/?" + _GAP + "(?:" + "|".join(re.escape(t) for t in sorted(RESERVED_TAGS, key=len, reverse=True))
    + r")(?=[\s/>]|$)",
    re.IGNORECASE,
)
