"""The dormant-memory benchmark's result (bench/dormant_memory.py): figures per dormant session from the
four snapshots, the global keys split into bounded and growing, a comparison with an earlier run."""

from __future__ import annotations

import argparse
from typing import Any

from bench import dormant_accounting as acc

TARGET_BYTES = 1024
# The figures compared side by side (path in `per_dormant_session`, label).
HEADLINE = (
    ("memory_usage.total", "MEMORY USAGE: keys + index + once"),
    ("memory_usage.session_keys", "  the session's own keys"),
    ("memory_usage.user_index", "  share of the user's index"),
    ("memory_usage.once_keys", "  dedupe keys (expire)"),
    ("keys_per_session", "keys per session (own)"),
    ("info_marginal.info.used_memory", "INFO used_memory, marginal"),
    ("info_marginal.info.used_memory_dataset", "  dataset, marginal"),
    ("info_marginal.stats.overhead.hashtable.main", "  keyspace dict, marginal"),
    ("info_marginal.stats.overhead.hashtable.expires", "  expires dict, marginal"),
    ("info_marginal.info.mem_clients_normal", "  client buffers, marginal"),
    ("info_average.info.used_memory", "INFO used_memory, average"),
    ("before_sweep.info.used_memory", "before the sweep: used_memory"),
    ("before_sweep.memory_usage_session_keys", "before the sweep: own keys"),
)


def _get(tree: dict[str, Any], path: str) -> Any:
    node: Any = tree
    head, _, rest = path.partition(".")
    while head:
        if head not in node:  # keys of the flat tables contain dots themselves
            return node.get(path)
        node, path = node[head], rest
        head, _, rest = path.partition(".")
    return node


def global_table(snaps: dict[str, Any], n_half: int, n: int) -> dict[str, Any]:
    """Every global key pattern at `half` and at the end: what grows with the sessions is per-session
    cost (bytes per added session); the rest is bounded."""
    half, end = snaps["half"]["global_patterns"], snaps["after_sweep"]["global_patterns"]
    out: dict[str, Any] = {}
    for pattern in sorted(set(half) | set(end), key=lambda p: -end.get(p, {"bytes": 0})["bytes"]):
        a, b = half.get(pattern, acc._group()), end.get(pattern, acc._group())
        growth = (b["bytes"] - a["bytes"]) / max(1, n - n_half)
        out[pattern] = {"keys": b["keys"], "bytes": b["bytes"], "with_ttl": b["with_ttl"], "max_ttl_s": b["max_ttl_s"],
                        "encodings": b["encodings"], "bytes_at_half": a["bytes"],
                        "grows_per_session": round(growth, 1)}
    if len(out) > 40:  # a family of global keys with ids in their names: itself a finding, kept short
        rest = list(out)[40:]
        out = {p: out[p] for p in list(out)[:40]} | {"(others)": {"patterns": len(rest), "bytes": sum(out[p]["bytes"] for p in rest)}}
    return out


def _kinds_delta(later: dict[str, Any], earlier: dict[str, Any], n: int) -> dict[str, float]:
    kinds = set(later["session_kinds"]) | set(earlier["session_kinds"])
    return {k: round((later["session_kinds"].get(k, {"bytes": 0})["bytes"]
                      - earlier["session_kinds"].get(k, {"bytes": 0})["bytes"]) / n, 1) for k in sorted(kinds)}


# Redis 7.0's keyspace overhead (MEMORY STATS overhead.hashtable.main): per key a dictEntry (24 B) and
# an robj (16 B), both also inside that key's MEMORY USAGE; plus 8 B per bucket of a table sized to a
# power of two by the peak key count, shrunk only below 10% fill (so sized by the live peak).
PER_KEY_DICT_BYTES = 24 + 16


def dict_overhead(snap: dict[str, Any], n: int) -> dict[str, Any]:
    keys_count = snap["keyspace"]["keys"]
    main = snap["stats"].get("overhead.hashtable.main", 0)
    slots_bytes = main - keys_count * PER_KEY_DICT_BYTES
    return {"keys": keys_count, "overhead_hashtable_main": main, "entries_bytes": keys_count * PER_KEY_DICT_BYTES,
            "bucket_slots": slots_bytes // 8, "bucket_bytes": slots_bytes,
            "bucket_bytes_per_session": round(slots_bytes / n, 1),
            "expires_overhead": snap["stats"].get("overhead.hashtable.expires", 0),
            "expires_keys": snap["keyspace"]["expires"]}


def per_dormant_session(snaps: dict[str, Any], n_half: int, n: int) -> dict[str, Any]:
    after = snaps["after_sweep"]
    own = sum(g["bytes"] for g in after["session_kinds"].values()) / n
    index, once = acc.index_share(after, n), acc.once_per_session(after, n)
    second = n - n_half
    return {
        "memory_usage": {"total": round(own + index + once, 1), "session_keys": round(own, 1),
                         "user_index": index, "once_keys": once},
        "keys_per_session": round(sum(g["keys"] for g in after["session_kinds"].values()) / n, 3),
        "by_kind": acc.kinds_per_session(after, n),
        # What one more dormant session adds (the second half), fixed costs cancelled out.
        "info_marginal": acc.per_session(after, snaps["half"], second),
        # Everything over the empty stack, divided by N: fixed costs (clients, Lua, streams) included.
        "info_average": acc.per_session(after, snaps["baseline"], n),
        "before_sweep": acc.per_session(snaps["before_sweep"], snaps["half"], second),
        "before_sweep_by_kind": _kinds_delta(snaps["before_sweep"], snaps["half"], second),
        # The keyspace tables at the end (buckets sized by the peak: the N sessions unswept at once).
        "keyspace_dict": dict_overhead(after, n),
        "keyspace_dict_at_the_peak": dict_overhead(snaps["before_sweep"], n),
    }


def summarize(args: argparse.Namespace, measured: dict[str, Any], compare: dict[str, Any] | None, python: str,
              redis_version: str, load: dict[str, float]) -> dict[str, Any]:
    snaps, n, half = measured["snapshots"], args.n, measured["half"]
    per = per_dormant_session(snaps, half, n)
    marginal = per["info_marginal"]["info.used_memory"]
    result: dict[str, Any] = {
        "n": n, "prompt": args.prompt, "label": args.label, "src": str(args.src or "this tree"),
        "python": python, "redis": redis_version, "loadavg": load,
        **{k: v for k, v in measured.items() if k not in ("snapshots", "half")},
        "per_dormant_session": per,
        "global_keys": global_table(snaps, half, n),
        "snapshots": {name: {k: v for k, v in s.items() if k not in ("session_kinds", "global_patterns")}
                      for name, s in snaps.items()},
        "target_bytes": TARGET_BYTES,
        "meets_target": per["memory_usage"]["total"] <= TARGET_BYTES and marginal <= TARGET_BYTES,
        "extrapolated_10k_mib": round(per["memory_usage"]["total"] * 10_000 / 2**20, 2),
    }
    if compare is not None:
        result["compared_with"] = {"label": compare.get("label"), "n": compare.get("n"), "prompt": compare.get("prompt"),
                                   "loadavg": compare.get("loadavg"), "side_by_side": side_by_side(compare, result)}
    return result


def side_by_side(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for path, _ in HEADLINE:
        a = _get(before.get("per_dormant_session", {}), path)
        b = _get(after["per_dormant_session"], path)
        ratio = round(b / a, 3) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else None
        out[path] = {"before": a, "after": b, "after_over_before": ratio}
    return out


def print_table(result: dict[str, Any]) -> None:
    per = result["per_dormant_session"]
    print(f"\n{result['n']} dormant sessions ({result['prompt']} prompt each), bytes per dormant session, "
          f"load avg {result['loadavg']}")
    cmp = result.get("compared_with")
    if cmp:
        print(f"{'':40}{str(cmp['label'])[:14]:>14}{result['label'][:14]:>14}{'ratio':>8}")
        for path, label in HEADLINE:
            row = cmp["side_by_side"][path]
            ratio = "" if row["after_over_before"] is None else f"{row['after_over_before']:.2f}"
            print(f"{label:40}{_num(row['before']):>14}{_num(row['after']):>14}{ratio:>8}")
    else:
        for path, label in HEADLINE:
            print(f"{label:40}{_num(_get(per, path)):>14}")
    print("own keys by kind (after the sweep):")
    for kind, row in per["by_kind"].items():
        print(f"  {kind:38}{row['bytes_per_session']:>14}  {row['encodings']}")
    print("global keys (bytes at the end, growth per added session):")
    for pattern, row in list(result["global_keys"].items())[:12]:
        ttl = f"ttl<={row['max_ttl_s']}s" if row["with_ttl"] else ""
        print(f"  {pattern:38}{row['bytes']:>14}{row['grows_per_session']:>10}  {row['keys']} keys {ttl}")
    print(f"target <= {result['target_bytes']} B per dormant session (MEMORY USAGE and INFO marginal): "
          f"{'met' if result['meets_target'] else 'NOT met'}")


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"
