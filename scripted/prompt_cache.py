"""OpenAI's prompt cache, simulated for the scripted model (so offline runs report cache hits).

OpenAI caches exact prompt prefixes (tools and instructions included), routed by `prompt_cache_key`:
nothing below 1,024 tokens, then hits in 128-token steps, for the longest prefix seen before.
Tokens are estimated as 4 characters of the canonical request text, as the scripted usage is.
One key stands for one cache machine, which keeps the last 64 prompts: requests without a key
(every session under the one empty key) crowd each other out, as they do on one real machine, and the
sessions sharing a key (services/runtime/turns/cache_key.py) keep each other's prefixes warm. A
key unused for `ttl_s` is dropped, as OpenAI drops a cached prefix 5 to 10 minutes after its last
use: the simulator lives in the runtime's process in offline runs, and a session that went dormant
must not keep memory there (the soak's runtime RSS, bench/soak.py).
"""

from __future__ import annotations

import time
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable

MIN_TOKENS = 1024
STEP_TOKENS = 128
CHARS_PER_TOKEN = 4


BLOCK_CHARS = STEP_TOKENS * CHARS_PER_TOKEN  # a hit is counted in whole steps: compare whole blocks


def block_chain(prompt: str) -> array[int]:
    """One hash per whole 512-character block, each chained to the one before (equal at position k
    means the first k+1 blocks are equal). A prompt's ~50 KB is kept as ~100 machine words (800 B;
    as Python ints in a list it was ~4 KB, with the prompts themselves ~85 MB for 512 sessions)."""
    out = array("q")
    h = 0
    for i in range(0, len(prompt) - BLOCK_CHARS + 1, BLOCK_CHARS):
        h = hash((h, prompt[i : i + BLOCK_CHARS]))
        out.append(h)
    return out


def common_blocks(a: array[int], b: array[int]) -> int:
    """Whole blocks the two prompts share from the start (chained: the first unequal ends it)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid - 1] == b[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def cached_tokens(prefix_tokens: int) -> int:
    if prefix_tokens < MIN_TOKENS:
        return 0
    return prefix_tokens // STEP_TOKENS * STEP_TOKENS


class PromptCache:
    """Per key, the last few prompts seen (bounded: keys LRU and dropped `ttl_s` after their last use,
    prompts per key), as block chains."""

    def __init__(self, max_keys: int = 512, per_key: int = 64, ttl_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._seen: OrderedDict[str, deque[array[int]]] = OrderedDict()
        self._used: dict[str, float] = {}
        self._max_keys = max_keys
        self._per_key = per_key
        self._ttl_s = ttl_s
        self._clock = clock

    def __len__(self) -> int:
        return len(self._seen)

    def lookup_and_store(self, key: str, prompt: str) -> int:
        """Cached tokens for `prompt`, then remember it for later requests with the same key."""
        now = self._clock()
        self._expire(now)
        chain = block_chain(prompt)
        seen = self._seen.get(key)
        best = max((common_blocks(p, chain) for p in seen), default=0) if seen else 0
        if seen is None:
            seen = deque(maxlen=self._per_key)
            self._seen[key] = seen
            while len(self._seen) > self._max_keys:
                self._used.pop(self._seen.popitem(last=False)[0], None)
        self._seen.move_to_end(key)
        self._used[key] = now
        seen.append(chain)
        return cached_tokens(best * STEP_TOKENS)

    def _expire(self, now: float) -> None:
        """The least recently used keys first (the LRU order is the order of last use)."""
        while self._seen:
            oldest = next(iter(self._seen))
            if now - self._used.get(oldest, now) < self._ttl_s:
                return
            del self._seen[oldest]
            self._used.pop(oldest, None)
