"""OpenAI's prompt cache, simulated for the scripted model (so offline runs report cache hits).

OpenAI caches exact prompt prefixes (tools and instructions included), routed by `prompt_cache_key`:
nothing below 1,024 tokens, then hits in 128-token steps, for the longest prefix seen before.
Tokens are estimated as 4 characters of the canonical request text, as the scripted usage is.
One key stands for one cache machine, which keeps the last few prompts: requests without a key
(every session under the one empty key) crowd each other out, as they do on one real machine.
"""

from __future__ import annotations

from collections import OrderedDict, deque

MIN_TOKENS = 1024
STEP_TOKENS = 128
CHARS_PER_TOKEN = 4


def common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by binary search over C-speed slice comparisons."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def cached_tokens(prefix_tokens: int) -> int:
    if prefix_tokens < MIN_TOKENS:
        return 0
    return prefix_tokens // STEP_TOKENS * STEP_TOKENS


class PromptCache:
    """Per key, the last few prompts seen (bounded: keys LRU, prompts per key)."""

    def __init__(self, max_keys: int = 512, per_key: int = 8) -> None:
        self._seen: OrderedDict[str, deque[str]] = OrderedDict()
        self._max_keys = max_keys
        self._per_key = per_key

    def lookup_and_store(self, key: str, prompt: str) -> int:
        """Cached tokens for `prompt`, then remember it for later requests with the same key."""
        seen = self._seen.get(key)
        best = max((common_prefix(p, prompt) for p in seen), default=0) if seen else 0
        if seen is None:
            seen = deque(maxlen=self._per_key)
            self._seen[key] = seen
            while len(self._seen) > self._max_keys:
                self._seen.popitem(last=False)
        self._seen.move_to_end(key)
        seen.append(prompt)
        return cached_tokens(best // CHARS_PER_TOKEN)
