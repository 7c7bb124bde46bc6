"""The `prompt_cache_key` of a session's model calls (docs/cache.md "The prompt_cache_key policy";
reference openai-api-rules.md §6).

OpenAI hashes the key with the prompt's start to pick a cache machine, on both cache regimes. A key
per session keeps a session's own turns together but sends every new session to a machine that has
never seen the static prefix; one key for all sessions overflows above ~15 requests a minute per
prefix+key pair. So sessions with the same system prompt (one per variant and prompt version) share
one of a fixed number of keys, the shard picked from the session id: stable for the session (its
turns meet their own cache), shared with the other sessions of the shard (a new session meets the
prefix they wrote), and the traffic per key bounded by the shard count.
"""

from __future__ import annotations

import hashlib
from typing import Literal

Policy = Literal["shared", "session"]


def prompt_cache_key(policy: Policy, shards: int, sid: str, variant: str) -> str:
    if policy == "session":
        return sid
    shard = int.from_bytes(hashlib.sha256(sid.encode()).digest()[:4], "big") % max(1, shards)
    return f"gamma-{variant}-{shard}"
