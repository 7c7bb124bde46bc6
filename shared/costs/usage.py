"""A reply's usage, read no more strictly than the SDK reads it (reference §5); the runtime's streams and the
compaction service's summaries read it alike (docs/costs.md).

The SDK builds reply objects without validation, so a field a server leaves out reads as None and
raises nothing. Compatible servers, Azure PTU-M deployments and older gateways leave out
`cache_write_tokens` or whole `*_details` objects, or send them as null (Codex parses both details
objects as optional): every field here is optional, a missing or non-integer one counts 0, and no
usage object at all is a zero Usage. `cached_tokens` and `cache_write_tokens` are parts of the input
(reference §5: the parts are disjoint)."""

from __future__ import annotations

from typing import Any

from shared.contracts.records.messages import Usage


def _count(obj: Any, *path: str) -> int:
    for name in path:
        obj = obj.get(name) if isinstance(obj, dict) else None
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        return 0
    return max(0, int(obj))


def responses_usage(raw: Any) -> Usage:
    """`response.usage` of a Responses stream's final event (`ResponseUsage` in the SDK)."""
    inp, out = _count(raw, "input_tokens"), _count(raw, "output_tokens")
    return Usage(input=inp, output=out,
                 cache_read=_count(raw, "input_tokens_details", "cached_tokens"),
                 cache_write=_count(raw, "input_tokens_details", "cache_write_tokens"),
                 reasoning=_count(raw, "output_tokens_details", "reasoning_tokens"),
                 total_tokens=_count(raw, "total_tokens") or inp + out)


def chat_usage(raw: Any) -> Usage:
    """The `usage` chunk of a Chat Completions stream (`CompletionUsage` in the SDK)."""
    inp, out = _count(raw, "prompt_tokens"), _count(raw, "completion_tokens")
    return Usage(input=inp, output=out,
                 cache_read=_count(raw, "prompt_tokens_details", "cached_tokens"),
                 cache_write=_count(raw, "prompt_tokens_details", "cache_write_tokens"),
                 reasoning=_count(raw, "completion_tokens_details", "reasoning_tokens"),
                 total_tokens=_count(raw, "total_tokens") or inp + out)
