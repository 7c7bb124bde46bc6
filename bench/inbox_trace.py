"""`bench/e2e.py --trace`: where a live inbox entry waits, hop by hop, from the runtime's
`inbox_entry_timing` / `file_write_timing` lines (GAMMA_TRACE_INBOX=1) and the bench's own send and
answer times. Times: the entry id is Redis's clock at the append; the rest is the machine's clock.

Per entry type: append -> read by the worker (`read`), read -> dequeued by its session's dispatcher
(`queued`), dequeued -> handled (`handle`). A file save is split end to end: HTTP sent -> inbox append
(proxy: auth, blob staged), append -> handled (runtime), handled -> HTTP answer (reply BLPOP, the
ArtifactChange publish, the response); and the runtime's handling per step. An entry that queued
long is attributed to the entry its dispatcher handled just before (`queued_behind`).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))], 1)


def _summary(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50_ms": _pct(values, 0.5), "p90_ms": _pct(values, 0.9), "p99_ms": _pct(values, 0.99),
            "max_ms": round(max(values), 1) if values else None}


def _lines(log: Path, event: str) -> list[dict[str, Any]]:
    out = []
    for raw in log.read_text(errors="replace").splitlines():
        if event not in raw:
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if line.get("event") == event:
            out.append(line)
    return out


def summarize(log: Path, proxy_log: Path, file_sends: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """`file_sends`: session -> (sent, answered) of each file save, in order."""
    entries = _lines(log, "inbox_entry_timing")
    by_type: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    per_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        for hop in ("read_ms", "queued_ms", "handle_ms"):
            by_type[e["type"]][hop].append(float(e[hop]))
        per_session[e["session_id"]].append(e)
    behind: Counter[str] = Counter()
    behind_ms: dict[str, list[float]] = defaultdict(list)
    for lines in per_session.values():
        lines.sort(key=lambda x: x["done"])
        for prev, cur in zip(lines, lines[1:], strict=False):
            if cur["queued_ms"] > 100:
                behind[f"{cur['type']} behind {prev['type']}"] += 1
                behind_ms[prev["type"]].append(float(prev["handle_ms"]))
    out: dict[str, Any] = {"by_type": {t: {hop: _summary(v) for hop, v in hops.items()} for t, hops in by_type.items()},
                           "queued_behind": dict(behind.most_common(12)),
                           "steps_file_write": _steps(log)}
    out["file_save"] = _file_save(per_session, file_sends)
    out["file_put_proxy"] = _proxy_put(proxy_log, file_sends)
    return out


def _proxy_put(log: Path, sends: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """The proxy's side of a live PUT: sent -> its handler entered (client, uvicorn, the session row),
    then the body, the blob staged, the forward (inbox append -> reply), the ArtifactChange publish."""
    puts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in _lines(log, "file_put_timing"):
        puts[line["session_id"]].append(line)
    hops: dict[str, list[float]] = defaultdict(list)
    for sid, pairs in sends.items():
        lines = sorted(puts.get(sid, []), key=lambda x: x["entered"])
        for sent, _ in pairs:
            p = next((x for x in lines if x["entered"] >= sent - 0.005), None)
            if p is None:
                continue
            lines.remove(p)
            hops["sent_to_arrived_ms"].append((p["arrived"] - sent) * 1000)
            hops["arrived_to_handler_ms"].append((p["entered"] - p["arrived"]) * 1000)
            for k in ("body_ms", "stage_ms", "forward_ms", "publish_ms"):
                hops[k].append(float(p[k]))
    return {k: _summary(v) for k, v in hops.items()}


def _steps(log: Path) -> dict[str, Any]:
    steps: dict[str, list[float]] = defaultdict(list)
    for line in _lines(log, "file_write_timing"):
        for k, v in line.items():
            if k.endswith("_ms"):
                steps[k].append(float(v))
    return {k: _summary(v) for k, v in steps.items()}


def _file_save(per_session: dict[str, list[dict[str, Any]]], sends: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    hops: dict[str, list[float]] = defaultdict(list)
    for sid, pairs in sends.items():
        writes = sorted((e for e in per_session.get(sid, []) if e["type"] == "file_write"),
                        key=lambda e: e["entry_id"])
        for sent, answered in pairs:
            w = next((e for e in writes if int(e["entry_id"].split("-")[0]) / 1000 >= sent - 0.005), None)
            if w is None:
                continue
            writes.remove(w)
            appended = int(w["entry_id"].split("-")[0]) / 1000
            hops["sent_to_append_ms"].append((appended - sent) * 1000)
            hops["append_to_handled_ms"].append((w["done"] - appended) * 1000)
            hops["handled_to_answer_ms"].append((answered - w["done"]) * 1000)
    return {k: _summary(v) for k, v in hops.items()}
