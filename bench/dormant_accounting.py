"""Where a Redis's memory goes, for the dormant-memory benchmark (bench/dormant_memory.py).

`snapshot` reads INFO memory and MEMORY STATS (the keyspace dict and expires dict overhead, client
buffers, Lua caches) and walks the keyspace once (SCAN, pipelined MEMORY USAGE / OBJECT ENCODING /
PTTL), grouping keys: per-session keys by kind (`gamma:{sid}:<kind>`), every other key by pattern with
its TTL. MEMORY USAGE counts a key's value, key string and dict entry, not its bucket in the keyspace
table nor its expires entry: those are the dict overhead, reported apart. Pure functions of the
replies; the driver decides what to compare.
"""

from __future__ import annotations

import re
import time
from typing import Any

import redis

MEMORY_FIELDS = ("used_memory", "used_memory_dataset", "used_memory_overhead", "mem_clients_normal",
                 "used_memory_scripts_eval", "used_memory_startup")
STATS_FIELDS = ("clients.normal", "lua.caches", "functions.caches", "replication.backlog", "aof.buffer",
                "overhead.total", "keys.count", "dataset.bytes")
DB_STATS = ("overhead.hashtable.main", "overhead.hashtable.expires")
_SESSION = re.compile(r"^gamma:\{([^}]+)\}:([^:]+)")
_ONCE = re.compile(r"^gamma:once:([^:]+):")


def _pairs(reply: Any) -> dict[str, Any]:
    """MEMORY STATS as a dict (redis-py parses it into one; a raw reply is a flat list)."""
    items = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
    return {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in items}


def memory_stats(r: redis.Redis, db: int) -> dict[str, int]:
    stats = _pairs(r.execute_command("MEMORY", "STATS"))
    out = {k: int(stats[k]) for k in STATS_FIELDS if k in stats}
    per_db = stats.get(f"db.{db}")
    if per_db is not None:
        fields = _pairs(per_db)
        out.update({k: int(fields[k]) for k in DB_STATS if k in fields})
    return out


def pattern_of(name: str) -> str:
    """A global key's family: `gamma:once:<scope>:*`, `gamma:user:*:<kind>`, `gamma:health:*`, else its
    name (the service streams and sorted sets, a few)."""
    if m := _ONCE.match(name):
        return f"gamma:once:{m.group(1)}:*"
    parts = name.split(":")
    if len(parts) >= 4 and parts[1] == "user":
        return f"gamma:user:*:{parts[3]}"
    return "gamma:health:*" if parts[1:2] == ["health"] else name


def walk_keys(r: redis.Redis, batch: int = 1000) -> dict[str, Any]:
    """One SCAN: per-session kinds (keys, bytes, encodings, with TTL) and global patterns (same)."""
    kinds: dict[str, dict[str, Any]] = {}
    globals_: dict[str, dict[str, Any]] = {}
    sessions: set[str] = set()
    names: list[bytes] = []

    def flush() -> None:
        pipe = r.pipeline(transaction=False)
        for name in names:
            pipe.execute_command("MEMORY", "USAGE", name, "SAMPLES", "0")
            pipe.object("encoding", name)
            pipe.pttl(name)
        replies = pipe.execute()
        for i, raw in enumerate(names):
            size, encoding, ttl = replies[3 * i: 3 * i + 3]
            name = raw.decode()
            if m := _SESSION.match(name):
                sessions.add(m.group(1))
                group = kinds.setdefault(m.group(2), _group())
            else:
                group = globals_.setdefault(pattern_of(name), _group())
            group["keys"] += 1
            group["bytes"] += int(size or 0)
            group["with_ttl"] += int(ttl or -1) > 0
            label = encoding.decode() if isinstance(encoding, bytes) else str(encoding)
            group["encodings"][label] = group["encodings"].get(label, 0) + 1
            if int(ttl or -1) > 0:
                group["max_ttl_s"] = max(group["max_ttl_s"], round(int(ttl) / 1000))
        names.clear()

    for name in r.scan_iter(count=batch):
        names.append(name)
        if len(names) >= batch:
            flush()
    flush()
    return {"session_kinds": kinds, "global_patterns": globals_, "sessions_with_keys": len(sessions)}


def _group() -> dict[str, Any]:
    return {"keys": 0, "bytes": 0, "with_ttl": 0, "max_ttl_s": 0, "encodings": {}}


def snapshot(r: redis.Redis, db: int, settle_s: float = 6.0) -> dict[str, Any]:
    """INFO memory + MEMORY STATS + the keyspace walk, after the services' stream trim has run."""
    time.sleep(settle_s)  # the services trim their acknowledged service-stream entries every 5 s
    r.execute_command("MEMORY", "PURGE")
    info = r.info("memory")
    keyspace = r.info("keyspace").get(f"db{db}", {})
    walked = walk_keys(r)
    return {"info": {f: int(info[f]) for f in MEMORY_FIELDS if f in info},
            "stats": memory_stats(r, db),
            "keyspace": {"keys": int(keyspace.get("keys", 0)), "expires": int(keyspace.get("expires", 0))},
            "memory_usage_sum": sum(g["bytes"] for part in ("session_kinds", "global_patterns")
                                    for g in walked[part].values()),
            **walked}


def _flat(snap: dict[str, Any]) -> dict[str, int]:
    out = {f"info.{k}": v for k, v in snap["info"].items()}
    out.update({f"stats.{k}": v for k, v in snap["stats"].items()})
    out.update({f"keyspace.{k}": v for k, v in snap["keyspace"].items()})
    out["memory_usage_sum"] = snap["memory_usage_sum"]
    out["memory_usage_session_keys"] = sum(g["bytes"] for g in snap["session_kinds"].values())
    out["memory_usage_global_keys"] = sum(g["bytes"] for g in snap["global_patterns"].values())
    return out


def per_session(later: dict[str, Any], earlier: dict[str, Any], n: int) -> dict[str, float]:
    """(later - earlier) / n for every number of the two snapshots."""
    a, b = _flat(later), _flat(earlier)
    return {k: round((a[k] - b.get(k, 0)) / n, 1) for k in a}


def kinds_per_session(snap: dict[str, Any], n: int) -> dict[str, dict[str, Any]]:
    return {kind: {"keys_per_session": round(g["keys"] / n, 3), "bytes_per_session": round(g["bytes"] / n, 1),
                   "encodings": g["encodings"], "with_ttl": g["with_ttl"]}
            for kind, g in sorted(snap["session_kinds"].items())}


def index_share(snap: dict[str, Any], n: int) -> float:
    """The user's session index (one sorted set for the bench's one user), per session."""
    g = snap["global_patterns"].get("gamma:user:*:sessions", {"bytes": 0})
    return round(g["bytes"] / n, 1)


def once_per_session(snap: dict[str, Any], n: int) -> float:
    return round(sum(g["bytes"] for p, g in snap["global_patterns"].items() if p.startswith("gamma:once:")) / n, 1)
