"""bench-e2e's latencies read back after the load (bench/e2e.py): wakes from gamma:lifecycle, the
delivery of notifications and artifact edits from the inboxes, the ArtifactChanges stream and the
transcripts, and the p50/p99 summaries of each."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from shared.redis import keys
from tests.reliability.workload import DECK_REF, FILE_REF, SessionRecord, entry_time

# The hops of one artifact edit: HTTP answer (runtime applied + replied, proxy published), answer ->
# the digest's inbox entry, inbox -> transcript; and save -> ArtifactChange published -> inbox.
EDIT_HOPS = ("save_to_answer", "answer_to_inbox", "inbox_to_transcript", "save_to_publish", "publish_to_inbox")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, Any]:
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "p50_ms": _r(pct(ms, 0.5)), "p99_ms": _r(pct(ms, 0.99)),
            "mean_ms": _r(statistics.fmean(ms) if ms else None), "max_ms": _r(max(ms) if ms else None)}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def _stamp(entry_id: Any) -> float:
    """A stream entry's append time, seconds."""
    return int(entry_id.decode().split("-")[0]) / 1000


async def inbox_injections(r: aioredis.Redis, sid: str) -> list[tuple[float, dict[str, Any]]]:
    """(append time, Injection JSON) of every injection entry in the session's inbox."""
    return [(_stamp(entry_id), json.loads(fields[b"data"])) for entry_id, fields in await r.xrange(keys.inbox(sid))
            if fields.get(b"type") == b"injection"]


async def wake_latencies(r: aioredis.Redis, records: list[SessionRecord]) -> dict[str, list[float]]:
    """The woke=True prompt's send time -> the session's next SessionLive: first wakes, planned
    re-wakes after a suspend, and unplanned ones (the session lost its lease mid-load, e.g. a
    starved worker missed its renewals: worth watching)."""
    lives: dict[str, list[float]] = {}
    for entry_id, fields in await r.xrange(keys.LIFECYCLE):
        blob = b" ".join(v for v in fields.values() if isinstance(v, bytes))
        m = re.search(rb'"type":\s*"session_live".*?"session_id":\s*"([^"]+)"', blob)
        if m:
            lives.setdefault(m.group(1).decode(), []).append(_stamp(entry_id))
    out: dict[str, list[float]] = {"first": [], "rewake_after_suspend": [], "unplanned": []}
    for rec in records:
        woke = [p for p in rec.prompts if p.woke]
        for i, p in enumerate(woke):
            live = next((t for t in lives.get(rec.sid, []) if t >= p.sent_at - 0.05), None)
            if live is None:
                continue
            kind = "first" if i == 0 else "rewake_after_suspend" if p.token.startswith("[rewake:") else "unplanned"
            out[kind].append(live - p.sent_at)
    return out


async def change_publishes(r: aioredis.Redis) -> dict[tuple[str, str], list[float]]:
    """(session, ref) -> the append times of its ArtifactChanges (the stack keeps the streams untrimmed)."""
    out: dict[tuple[str, str], list[float]] = {}
    for entry_id, fields in await r.xrange(keys.ARTIFACT_CHANGES):
        blob = b" ".join(v for v in fields.values() if isinstance(v, bytes))
        sid, ref = re.search(rb'"session_id":\s*"([^"]+)"', blob), re.search(rb'"ref":\s*"([^"]+)"', blob)
        if sid and ref:
            out.setdefault((sid.group(1).decode(), ref.group(1).decode()), []).append(_stamp(entry_id))
    return out


def _recorded(data_dir: Path, sid: str) -> dict[tuple[Any, str], float]:
    """(source, sourceId) -> recorded time of each trusted injection in the session's transcript."""
    path = data_dir / "sessions" / sid / "transcript.jsonl"
    transcript = [json.loads(line) for line in path.read_text().splitlines()]
    return {(e["details"].get("source"), str(e["details"].get("sourceId"))): entry_time(e)
            for e in transcript if e.get("type") == "custom_message" and (e.get("details") or {}).get("trusted")}


def _notifications(out: dict[str, list[float]], rec: SessionRecord, injections: list[tuple[float, dict[str, Any]]],
                   recorded: dict[tuple[Any, str], float]) -> None:
    for nid, sent in rec.notifications.items():
        t = next((at for at, inj in injections if inj.get("source") == "notification"
                  and str(inj.get("source_id", "")).partition("#")[0] == nid), None)
        if t is not None:
            out["notification_to_inbox"].append(max(t - sent, 0.0))
        if ("notification", nid) in recorded:
            out["notification_to_transcript"].append(max(recorded[("notification", nid)] - sent, 0.0))


def _edits(out: dict[str, list[float]], rec: SessionRecord, injections: list[tuple[float, dict[str, Any]]],
           recorded: dict[tuple[Any, str], float], published: dict[tuple[str, str], list[float]]) -> None:
    for ref, kind in ((FILE_REF, "file"), (DECK_REF, "deck")):
        digests = sorted((at, inj) for at, inj in injections if inj.get("source") == "artifact" and inj.get("ref") == ref)
        answered = dict(rec.edit_answers.get(ref, []))
        for sent in rec.edits.get(ref, []):
            if sent in answered:
                out[f"{kind}_save_to_answer"].append(answered[sent] - sent)
            nxt = next(((at, inj) for at, inj in digests if at >= sent), None)
            if nxt is None:
                continue
            out[f"{kind}_to_inbox"].append(nxt[0] - sent)
            if sent in answered:
                out[f"{kind}_answer_to_inbox"].append(max(nxt[0] - answered[sent], 0.0))
            pub = next((t for t in published.get((rec.sid, ref), []) if t >= sent - 0.002), None)
            if pub is not None and pub <= nxt[0]:
                out[f"{kind}_save_to_publish"].append(max(pub - sent, 0.0))
                out[f"{kind}_publish_to_inbox"].append(nxt[0] - pub)
            # The recorded entry that covers it: the first recorded digest of the ref at or after that one.
            later = sorted(t for (src, sid), t in recorded.items() if src == "artifact" and sid.startswith(ref + "@")
                           and t >= nxt[0])
            if later:
                out[f"{kind}_to_transcript"].append(later[0] - sent)
                out[f"{kind}_inbox_to_transcript"].append(later[0] - nxt[0])


async def delivery_latencies(r: aioredis.Redis, records: list[SessionRecord], data_dir: Path) -> dict[str, list[float]]:
    """Per kind and hop, send -> inbox entry and -> recorded in the transcript (keys in the result's order)."""
    out: dict[str, list[float]] = {k: [] for k in ("notification_to_inbox", "notification_to_transcript",
                                                   "file_to_inbox", "deck_to_inbox",
                                                   "file_to_transcript", "deck_to_transcript")}
    out.update({f"{kind}_{hop}": [] for kind in ("file", "deck") for hop in EDIT_HOPS[:3]})
    out.update({f"{kind}_{hop}": [] for kind in ("file", "deck") for hop in EDIT_HOPS[3:]})
    published = await change_publishes(r)
    for rec in records:
        injections = await inbox_injections(r, rec.sid)
        recorded = _recorded(data_dir, rec.sid)
        _notifications(out, rec, injections, recorded)
        _edits(out, rec, injections, recorded, published)
    return out


def prompt_kinds(records: list[SessionRecord]) -> dict[str, Any]:
    """prompt -> answer split: prompts to a live session, and prompts that woke it (wake + barrier)."""
    live = [p.answered_at - p.sent_at for rec in records for p in rec.prompts if p.answered_at and not p.woke]
    woke = [p.answered_at - p.sent_at for rec in records for p in rec.prompts if p.answered_at and p.woke]
    return {"prompt_to_answer_live": summary(live), "prompt_to_answer_waking": summary(woke)}
