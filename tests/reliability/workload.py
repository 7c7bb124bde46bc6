"""A scripted client load against a running stack, and the exactly-once audit of what it left on disk.

Used by the fault-injection suite (tests/reliability/test_faults.py) and the load benchmark
(bench/e2e.py). Each session, in rounds: a remote notification, a file save, a deck edit, then a
prompt whose answer it waits for. Every request the stack acknowledged is remembered; the audit
then reads the transcripts and checks each one was recorded exactly once.

Retries follow what each endpoint promises: notifications are idempotent by id, file and deck
writes by content (a repeat is one more revision), so those retry until acknowledged. A prompt is
not idempotent, so an ambiguous attempt (no answer from the proxy) is never repeated with the same
text: the next attempt is a new prompt, and the ambiguous one is audited as "at most once".
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from shared.contracts.records.transcript import ENTRY_ADAPTER
from shared.contracts.records.ui import SessionUIState
from shared.redis import keys

RETRYABLE = {429, 500, 502, 503, 504}
PROXY_POOLS = 16  # LoadClient: sessions spread over this many connection pools (see __init__)
FILE = "notes.md"
DECK = "deck"
FILE_REF = f"file:{FILE}"
DECK_REF = f"gamma:file:{DECK}"
FROM_RE = re.compile(r'^<artifact_update[^>]*\bfrom_revision="(\d+)"')
TO_RE = re.compile(r'^<artifact_update[^>]*\bto_revision="(\d+)"')


class Unavailable(Exception):
    """The stack did not acknowledge a request before the deadline."""


@dataclass
class PromptRecord:
    token: str
    sent_at: float
    prompt_id: str | None = None  # set when the proxy acknowledged (202)
    woke: bool = False
    answered_at: float | None = None
    nudge: bool = False  # sent because an earlier prompt was stranded on a dead worker


@dataclass
class SessionRecord:
    sid: str
    prompts: list[PromptRecord] = field(default_factory=list)
    notifications: dict[str, float] = field(default_factory=dict)  # acknowledged id -> sent at
    # ref -> acknowledged edits (sent at); the digest numbers the revisions (a dormant file write
    # has none until it does), so the audit compares with the digest's own `current`.
    edits: dict[str, list[float]] = field(default_factory=dict)
    # ref -> (sent at, answered at) per acknowledged edit: the answer comes after the runtime applied
    # the write and the proxy published its ArtifactChange (bench/e2e.py splits the latency per hop).
    edit_answers: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    stranded: int = 0


@dataclass
class Stats:
    requests: int = 0
    retries: int = 0
    ambiguous_prompts: int = 0
    stranded_prompts: int = 0
    latencies: dict[str, list[float]] = field(default_factory=dict)

    def observe(self, kind: str, seconds: float) -> None:
        self.latencies.setdefault(kind, []).append(seconds)


class LoadClient:
    def __init__(self, proxy_url: str, notifications_url: str, api_token: str, service_token: str,
                 *, request_deadline_s: float = 60.0, answer_timeout_s: float = 45.0, poll_s: float = 0.3,
                 max_poll_s: float = 1.0) -> None:
        # Sessions spread over several small pools: httpx's pool scans every connection and waiting
        # request on each request, so 200 sessions on one pool of 400 spent the client's CPU there and
        # held requests in the client for seconds (bench-e2e: POST /messages p50 0.5 s, py-spy of the
        # client: 50% in httpcore's pool), which was then measured as the stack's latency.
        self._proxies = [self._client(proxy_url, api_token) for _ in range(PROXY_POOLS)]
        self._notifs = [self._client(notifications_url, service_token) for _ in range(PROXY_POOLS)]
        self.proxy, self.notif = self._proxies[0], self._notifs[0]
        self.request_deadline_s = request_deadline_s
        self.answer_timeout_s = answer_timeout_s
        self.poll_s = poll_s
        self.max_poll_s = max(poll_s, max_poll_s)
        self.stats = Stats()
        # Transcript entries read so far and the cursor after them, per session: a poll reads only
        # what was appended since (re-reading every page from 0 made the polling itself the load).
        self._read: dict[str, tuple[list[dict[str, Any]], str]] = {}

    @staticmethod
    def _client(url: str, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"},
                                 timeout=httpx.Timeout(20.0, connect=2.0),
                                 limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))

    def proxy_for(self, sid: str) -> httpx.AsyncClient:
        return self._proxies[zlib.crc32(sid.encode()) % len(self._proxies)]

    def notif_for(self, sid: str) -> httpx.AsyncClient:
        return self._notifs[zlib.crc32(sid.encode()) % len(self._notifs)]

    async def aclose(self) -> None:
        for client in (*self._proxies, *self._notifs):
            await client.aclose()


    async def _send(self, client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> httpx.Response:
        """Retry until a non-retryable answer: only for requests that are safe to repeat."""
        deadline = time.monotonic() + self.request_deadline_s
        delay = 0.1
        while True:
            self.stats.requests += 1
            try:
                resp = await client.request(method, url, **kw)
                if resp.status_code not in RETRYABLE:
                    return resp
                # 409 "waking" is handled by callers; 5xx means the stack is recovering.
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise Unavailable(f"{method} {url}")
            self.stats.retries += 1
            await asyncio.sleep(delay)
            delay = min(delay * 1.6, 1.0)

    async def _send_until(self, client: httpx.AsyncClient, method: str, url: str, ok: set[int], **kw: Any) -> httpx.Response:
        """Like `_send`, and also retries 409 (a write while the session is waking)."""
        deadline = time.monotonic() + self.request_deadline_s
        while True:
            resp = await self._send(client, method, url, **kw)
            if resp.status_code in ok:
                return resp
            if resp.status_code != 409 or time.monotonic() > deadline:
                raise AssertionError(f"{method} {url}: {resp.status_code} {resp.text[:300]}")
            self.stats.retries += 1
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------ operations

    async def create_session(self) -> SessionRecord:
        resp = await self._send_until(self.proxy, "POST", "/sessions", {201}, json={})
        return SessionRecord(sid=resp.json()["id"])

    async def notify(self, rec: SessionRecord, nid: str) -> None:
        body = {"session_id": rec.sid, "notification": {
            "id": nid, "type": "render.completed",
            # A failed render becomes one system_update (steer); a succeeded one would be an
            # artifact_update for the deck, which the runtime coalesces with the digest's per ref.
            "payload": {"renderId": nid, "ref": DECK_REF, "status": "failed", "error": "load test"},
        }}
        sent = time.time()
        resp = await self._send_until(self.notif_for(rec.sid), "POST", "/notifications", {200, 202}, json=body)
        rec.notifications[nid] = sent
        assert resp.json()["id"] == nid

    async def save_file(self, rec: SessionRecord, text: str) -> None:
        sent = time.time()
        resp = await self._send_until(self.proxy_for(rec.sid), "PUT", f"/sessions/{rec.sid}/workspace/files/{FILE}", {200, 201},
                                      content=text.encode())
        self._acked(rec, FILE_REF, sent)
        assert resp.json()["path"] == FILE

    async def edit_deck(self, rec: SessionRecord, n: int) -> None:
        sent = time.time()
        if DECK_REF not in rec.edits:
            resp = await self._send_until(self.proxy_for(rec.sid), "PUT", f"/sessions/{rec.sid}/documents/{DECK}", {200, 201},
                                          json={"title": "Load deck", "cards": [{"id": "c0", "title": "Start"}]})
        else:
            resp = await self._send_until(self.proxy_for(rec.sid), "PATCH", f"/sessions/{rec.sid}/documents/{DECK}", {200},
                                          json={"cards": [{"id": f"c{n}", "title": f"Card {n}"}]})
        self._acked(rec, DECK_REF, sent)
        assert isinstance(resp.json()["revision"], int)

    def _acked(self, rec: SessionRecord, ref: str, sent: float) -> None:
        rec.edits.setdefault(ref, []).append(sent)
        rec.edit_answers.setdefault(ref, []).append((sent, time.time()))

    async def prompt(self, rec: SessionRecord, label: str, *, nudge: bool = False) -> PromptRecord:
        """One attempt per text; on an ambiguous failure, a new prompt (new text) until one is acked."""
        deadline = time.monotonic() + self.request_deadline_s
        while True:
            token = f"[{label}:{uuid.uuid4().hex[:8]}]"
            p = PromptRecord(token=token, sent_at=time.time(), nudge=nudge)
            rec.prompts.append(p)
            self.stats.requests += 1
            try:
                resp = await self.proxy_for(rec.sid).post(f"/sessions/{rec.sid}/messages", json={"message": f"load prompt {token}"})
            except httpx.TransportError:
                resp = None
            if resp is not None and resp.status_code == 202:
                body = resp.json()
                p.prompt_id, p.woke = body["prompt_id"], bool(body["woke"])
                self.stats.latencies.setdefault("prompt_post_woke" if p.woke else "prompt_post", []).append(
                    time.time() - p.sent_at)  # the POST's round trip: the proxy's share of the answer time
                return p
            if resp is not None and resp.status_code not in RETRYABLE:
                raise AssertionError(f"prompt: {resp.status_code} {resp.text[:300]}")
            self.stats.ambiguous_prompts += 1
            if time.monotonic() > deadline:
                raise Unavailable("prompt")
            await asyncio.sleep(0.3)

    async def suspend(self, rec: SessionRecord) -> None:
        resp = await self._send_until(self.proxy_for(rec.sid), "POST", f"/sessions/{rec.sid}/suspend", {200})
        assert resp.json().get("status") == "dormant", resp.text

    async def transcript(self, sid: str) -> list[dict[str, Any]]:
        """Every entry so far, reading only the pages after the last cursor (as a client following
        the transcript would); a cursor the proxy refuses (400) starts again from 0."""
        entries, cursor = self._read.get(sid, ([], "0"))
        while True:
            resp = await self._send_until(self.proxy_for(sid), "GET", f"/sessions/{sid}/transcript", {200, 400},
                                          params={"cursor": cursor})
            if resp.status_code == 400:
                if cursor == "0":
                    raise AssertionError(f"GET transcript: 400 {resp.text[:300]}")
                entries, cursor = [], "0"
                continue
            page = resp.json()
            entries = entries + page["entries"]
            cursor = page["next_cursor"]
            if not page["has_more"]:
                break
        self._read[sid] = (entries, cursor)
        return list(entries)

    async def status(self, sid: str) -> dict[str, Any]:
        resp = await self._send_until(self.proxy_for(sid), "GET", f"/sessions/{sid}", {200})
        return dict(resp.json())

    async def wait_answer(self, rec: SessionRecord, p: PromptRecord, *, stranded_after_s: float = 8.0) -> bool:
        """Poll the transcript until `p` has a completed answer. A prompt whose session holder died
        (no lease, nothing running) waits for the next wake; like a user, the client then sends a
        follow-up message, which wakes the session (counted as `stranded`)."""
        deadline = time.monotonic() + self.answer_timeout_s
        last_nudge = time.monotonic()
        interval = self.poll_s  # the answer's time comes from the transcript, so polling may slow down
        while time.monotonic() < deadline:
            entries = await self.transcript(rec.sid)
            done = answered_tokens(entries)
            if p.token in done:
                p.answered_at = done[p.token]
                self.stats.observe("prompt_answer", p.answered_at - p.sent_at)
                return True
            if time.monotonic() - last_nudge > stranded_after_s:
                view = await self.status(rec.sid)
                if view["status"] == "dormant":
                    rec.stranded += 1
                    self.stats.stranded_prompts += 1
                    await self.prompt(rec, f"nudge:{rec.sid}", nudge=True)
                last_nudge = time.monotonic()
            await asyncio.sleep(interval)
            interval = min(interval * 1.5, self.max_poll_s)
        return False

    async def round(self, rec: SessionRecord, n: int) -> bool:
        if len(rec.edits) < 2:
            await self.create_artifacts(rec)
        await self.notify(rec, f"n-{rec.sid}-{n}")
        await self.save_file(rec, f"round {n} of {rec.sid}\n")
        await self.edit_deck(rec, n)
        p = await self.prompt(rec, f"{rec.sid}:{n}")
        return await self.wait_answer(rec, p)

    async def create_artifacts(self, rec: SessionRecord) -> None:
        """A dormant session only overwrites existing files and documents, so the file and the deck
        are created while it is live: wake it with a prompt first (again if it went dormant)."""
        while len(rec.edits) < 2:
            p = await self.prompt(rec, f"open:{rec.sid}")
            await self.wait_answer(rec, p)
            try:
                if FILE_REF not in rec.edits:
                    await self.save_file(rec, f"created in {rec.sid}\n")
                if DECK_REF not in rec.edits:
                    await self.edit_deck(rec, 0)
            except AssertionError as exc:
                if " 404 " not in str(exc):
                    raise


# ------------------------------------------------------------ audit


def user_token(entry: dict[str, Any]) -> str | None:
    msg = entry.get("message") or {}
    if entry.get("type") != "message" or msg.get("role") != "user" or not isinstance(msg.get("content"), str):
        return None
    m = re.search(r"\[[^\]]+:[0-9a-f]{8}\]", msg["content"])
    return m.group(0) if m else None


def entry_time(entry: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()


def answered_tokens(entries: list[dict[str, Any]]) -> dict[str, float]:
    """token -> time of the completed blocking answer that first follows its user entry."""
    out: dict[str, float] = {}
    waiting: list[str] = []
    for e in entries:
        token = user_token(e)
        if token:
            waiting.append(token)
        elif is_completed_answer(e) and waiting:
            for t in waiting:
                out.setdefault(t, entry_time(e))
            waiting = []
    return out


def is_completed_answer(entry: dict[str, Any]) -> bool:
    msg = entry.get("message") or {}
    return (entry.get("type") == "message" and msg.get("role") == "toolResult" and msg.get("toolName") == "message_user"
            and not msg.get("isError") and bool((msg.get("details") or {}).get("blockOnUser")))


@dataclass
class Audit:
    sessions: int = 0
    entries_checked: int = 0
    prompts_checked: int = 0
    notifications_checked: int = 0
    artifact_changes_checked: int = 0
    files_checked: int = 0
    losses: list[str] = field(default_factory=list)
    # Acknowledged and still durable in Redis, but never delivered: an inbox entry delivered to the
    # lease holder and never acknowledged (handed over only with the session's next holder), or a
    # change the digest keeps as an unsent note. Not lost; stuck.
    stuck: list[str] = field(default_factory=list)
    # Never delivered, yet the digest's `seen` is past them: something acknowledged revisions the agent
    # was never shown (a recorded injection reported a later to_revision than the one it carried).
    misacknowledged: list[str] = field(default_factory=list)
    # A transcript line written after a newer holder's lines but stamped before them: a paused worker
    # that passed its lease check, was stopped, and appended once resumed (and the fork it causes).
    stale_writes: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.losses or self.duplicates or self.corrupt)

    def summary(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions, "entries_checked": self.entries_checked, "prompts_checked": self.prompts_checked,
            "notifications_checked": self.notifications_checked,
            "artifact_changes_checked": self.artifact_changes_checked, "files_checked": self.files_checked,
            "losses": len(self.losses), "stuck_undelivered": len(self.stuck),
            "misacknowledged": len(self.misacknowledged), "stale_writes": len(self.stale_writes), "duplicates": len(self.duplicates),
            "corrupt": len(self.corrupt),
        }


def read_transcript_file(path: Path, audit: Audit) -> list[dict[str, Any]]:
    """Every line must parse as a transcript entry, and the entries form one chain (each parentId is
    the previous id): a stale writer appending after losing its lease would fork it."""
    entries: list[dict[str, Any]] = []
    if not path.exists():
        return entries
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        try:
            raw = json.loads(line)
            ENTRY_ADAPTER.validate_python(raw)
        except ValueError as exc:
            audit.corrupt.append(f"{path}:{i + 1}: {exc!s:.200}")
            continue
        entries.append(raw)
    ids = Counter(e["id"] for e in entries)
    for eid, n in ids.items():
        if n > 1:
            audit.duplicates.append(f"{path}: entry id {eid} x{n}")
    stale = False
    for prev, cur in zip(entries, entries[1:], strict=False):
        if cur.get("parentId") != prev["id"]:
            text = f"{path}: entry {cur['id']} has parent {cur.get('parentId')}, not {prev['id']} (fork)"
            late = entry_time(cur) < entry_time(prev)  # stamped before the line it follows
            (audit.stale_writes if late or stale else audit.corrupt).append(text + (" written late" if late else ""))
            stale = late
        else:
            stale = False
    audit.entries_checked += len(entries)
    return entries


def artifact_spans(injections: list[dict[str, Any]], ref: str) -> list[tuple[int, int]]:
    """(from, to) of every recorded digest of `ref`, by `to`; no from_revision = from the start."""
    spans = []
    for e in injections:
        if e["details"].get("source") != "artifact" or not str(e["details"].get("sourceId", "")).startswith(ref + "@"):
            continue
        content = e.get("content", "")
        to = TO_RE.search(content)
        if to is None:
            continue
        lo = FROM_RE.search(content)
        spans.append((int(lo.group(1)) if lo else 0, int(to.group(1))))
    return sorted(spans, key=lambda span: span[1])


def audit_session(rec: SessionRecord, session_dir: Path, audit: Audit, digest_current: dict[str, int],
                  pending: set[str] | None = None, digest_seen: dict[str, int] | None = None) -> None:
    """`digest_current`: ref -> the digest's current revision (Redis `gamma:{sid}:revisions`);
    `pending`: what Redis holds for the session undelivered (`durable_undelivered`)."""
    pending = pending or set()
    digest_seen = digest_seen or {}

    def lost(key: str, text: str, upto: int | None = None) -> None:
        if key in pending:
            audit.stuck.append(text)
        elif upto is not None and digest_seen.get(key, -1) >= upto:
            audit.misacknowledged.append(text)
        else:
            audit.losses.append(text)

    audit.sessions += 1
    entries = read_transcript_file(session_dir / "transcript.jsonl", audit)
    tokens = Counter(t for t in (user_token(e) for e in entries) if t)
    for token, n in tokens.items():
        if n > 1:
            audit.duplicates.append(f"{rec.sid}: prompt {token} recorded {n} times")
    prompt_ids = Counter(e.get("promptId") for e in entries if user_token(e))
    for pid, n in prompt_ids.items():
        if pid and n > 1:
            audit.duplicates.append(f"{rec.sid}: prompt id {pid} recorded {n} times")
    answered = answered_tokens(entries)
    for p in rec.prompts:
        audit.prompts_checked += 1
        if p.prompt_id is not None and tokens[p.token] == 0:
            lost(p.token, f"{rec.sid}: acknowledged prompt {p.token} never recorded")
        if tokens[p.token] and p.token not in answered:
            lost(p.token, f"{rec.sid}: prompt {p.token} recorded but never answered")
    # Two completed blocking answers with no user prompt between them: one prompt answered twice.
    answers_since_prompt = 0
    for e in entries:
        if user_token(e):
            answers_since_prompt = 0
        elif is_completed_answer(e):
            answers_since_prompt += 1
            if answers_since_prompt > 1:
                audit.duplicates.append(f"{rec.sid}: a second answer run for one prompt (no user turn between) "
                                        f"at entry {e['id']}")
    injections = [e for e in entries if e.get("type") == "custom_message" and (e.get("details") or {}).get("trusted")]
    sources = Counter((e["details"].get("source"), e["details"].get("sourceId")) for e in injections)
    for key, n in sources.items():
        if n > 1:
            audit.duplicates.append(f"{rec.sid}: injection {key} recorded {n} times")
    recorded_notifications = {sid.partition("#")[0] for (src, sid) in sources if src == "notification" and sid}
    for nid in rec.notifications:
        audit.notifications_checked += 1
        if nid not in recorded_notifications:
            lost(nid, f"{rec.sid}: notification {nid} acknowledged but never recorded")
    for ref, edits in rec.edits.items():
        audit.artifact_changes_checked += len(edits)
        current = digest_current.get(ref, 0)
        if current < len(edits):
            lost(ref, f"{rec.sid}: {ref}: {len(edits)} edits acknowledged, the digest counted {current}")
        covered = 0
        for lo, hi in artifact_spans(injections, ref):
            if hi <= covered or lo < covered:
                # Another entry already told the agent about revisions lo..covered.
                audit.duplicates.append(f"{rec.sid}: {ref} digest {lo}..{hi} overlaps what was recorded (up to {covered})")
            elif lo > covered:
                lost(ref, f"{rec.sid}: {ref} revisions {covered}..{lo} never delivered", lo)
            covered = max(covered, hi)
        if covered < current:
            lost(ref, f"{rec.sid}: {ref} revisions {covered}..{current} never delivered", current)
    audit_json_files(session_dir, audit)


def audit_json_files(session_dir: Path, audit: Audit) -> None:
    """state.json must validate as SessionUIState; every other JSON file of the session must parse."""
    for path in sorted(session_dir.rglob("*.json")):
        if any(part.startswith(".") for part in path.relative_to(session_dir).parts[:-1]):
            continue
        audit.files_checked += 1
        try:
            data = json.loads(path.read_text())
            if path.name == "state.json" and path.parent == session_dir:
                SessionUIState.model_validate(data)
        except ValueError as exc:
            audit.corrupt.append(f"{path}: torn or invalid: {exc!s:.200}")


def settled(rec: SessionRecord, entries: list[dict[str, Any]], digest_current: dict[str, int]) -> bool:
    """Everything acknowledged has reached the transcript (so a flush prompt is no longer needed)."""
    injections = [e for e in entries if e.get("type") == "custom_message" and (e.get("details") or {}).get("trusted")]
    notes = {str(e["details"].get("sourceId", "")).partition("#")[0] for e in injections
             if e["details"].get("source") == "notification"}
    if not set(rec.notifications) <= notes:
        return False
    for ref, current in digest_current.items():
        if ref in rec.edits and max((hi for _, hi in artifact_spans(injections, ref)), default=0) < current:
            return False
    answered = answered_tokens(entries)
    return all(p.token in answered for p in rec.prompts if p.prompt_id is not None)


async def durable_undelivered(client: aioredis.Redis, sid: str) -> set[str]:
    """What Redis still holds for the session but never reached its transcript: prompt tokens,
    notification ids and artifact refs of inbox entries delivered to the holder (group `runtime`) and
    never acknowledged, and refs whose changes the digest keeps as notes it has not sent."""
    found: set[str] = set()
    for ref, raw in (await client.hgetall(keys.revisions(sid))).items():
        if json.loads(raw).get("notes"):
            found.add(ref.decode() if isinstance(ref, bytes) else ref)
    stream = keys.inbox(sid)
    try:
        rows = await client.xpending_range(stream, keys.RUNTIME_GROUP, min="-", max="+", count=10_000)
    except aioredis.ResponseError:
        return found
    for row in rows:
        entry_id = row["message_id"]
        for _, fields in await client.xrange(stream, min=entry_id, max=entry_id):
            data = json.loads(fields.get(b"data", b"{}"))
            if data.get("type") == "user_prompt":
                m = re.search(r"\[[^\]]+:[0-9a-f]{8}\]", data.get("message", ""))
                if m:
                    found.add(m.group(0))
            elif data.get("type") == "injection":
                found.add(str(data.get("source_id", "")).partition("#")[0])
                if data.get("ref"):
                    found.add(str(data["ref"]))
    return found


async def pending_owners(client: aioredis.Redis, sid: str) -> list[str]:
    """Who holds the session's unacked inbox entries (consumer, idle ms, deliveries, what) and who
    holds its lease: the evidence a STUCK audit line needs (a paused worker's PEL, or the holder's own)."""
    stream = keys.inbox(sid)
    try:
        rows = await client.xpending_range(stream, keys.RUNTIME_GROUP, min="-", max="+", count=10_000)
    except aioredis.ResponseError:
        return []
    lease = await client.get(keys.lease(sid))
    out = [f"{sid}: lease {lease!r}"]
    for row in rows:
        entry_id = row["message_id"]
        what = "trimmed"
        for _, fields in await client.xrange(stream, min=entry_id, max=entry_id):
            data = json.loads(fields.get(b"data", b"{}"))
            what = f"{data.get('type')} {data.get('source_id') or data.get('message', '')[:40]}"
        out.append(f"{sid}: pending {entry_id!r} consumer={row['consumer']!r} idle_ms={row['time_since_delivered']} "
                   f"deliveries={row['times_delivered']} {what}")
    return out


async def digest_backlog(client: aioredis.Redis) -> dict[str, set[str]]:
    """sid -> refs with changes still in `gamma:artifacts:changes` for the digest group: delivered and
    unacknowledged, or not yet delivered (a digest that stopped consuming leaves them there)."""
    from shared.streams.bus import decode_fields

    stream, group = keys.ARTIFACT_CHANGES, "digest"
    try:
        groups = await client.xinfo_groups(stream)
    except aioredis.ResponseError:
        return {}
    info = next((g for g in groups if (g.get("name") or g.get(b"name")) in ("digest", b"digest")), None)
    if info is None:
        return {}
    last = info.get("last-delivered-id") or info.get(b"last-delivered-id") or b"0-0"
    last = last.decode() if isinstance(last, bytes) else str(last)
    ids = [row["message_id"] for row in await client.xpending_range(stream, group, min="-", max="+", count=100_000)]
    entries = [e for i in ids for e in await client.xrange(stream, min=i, max=i)]
    entries += await client.xrange(stream, min="(" + last, max="+")
    out: dict[str, set[str]] = {}
    for _, fields in entries:
        try:
            body, _ = decode_fields(fields)
        except ValueError:
            continue
        if isinstance(body, dict) and body.get("session_id") and body.get("ref"):
            out.setdefault(str(body["session_id"]), set()).add(str(body["ref"]))
    return out


async def digest_revisions(client: aioredis.Redis, sid: str, field_name: str = "current") -> dict[str, int]:
    """ref -> `current` (or `seen`) of the digest's RefState (the revision numbering the injections use)."""
    raw = await client.hgetall(keys.revisions(sid))
    out = {}
    for k, v in raw.items():
        value = json.loads(v).get(field_name)
        if value is not None:
            out[k.decode() if isinstance(k, bytes) else k] = int(value)
    return out


async def digest_caught_up(client: aioredis.Redis, sid: str) -> bool:
    """The digest has taken in every change of the session (none left in its stream, none waiting
    out a debounce): only then is its `current` the revision the transcript must reach."""
    if (await digest_backlog(client)).get(sid):
        return False
    due = await client.zrange(keys.DIGEST_DUE, 0, -1)
    return not any(json.loads(member)[0] == sid for member in due)


async def flush(client: LoadClient, rec: SessionRecord, redis_client: aioredis.Redis, deadline_s: float,
                note: Callable[[str], None] | None = None) -> bool:
    """Send flush prompts until everything acknowledged is in the transcript (pending injections
    enter at the next user turn), or the deadline passes. A digest still catching up (after a Redis
    restart it can run tens of seconds behind the changes) is waited for first: checked against its
    `current` before then, a session looks settled and its last digests wait for a prompt never sent."""
    deadline = time.monotonic() + deadline_s
    n, digest_wait = 0, 0.0
    await asyncio.sleep(1.0)  # the digest's debounce
    while time.monotonic() < deadline:
        if not await digest_caught_up(redis_client, rec.sid):
            await asyncio.sleep(0.5)
            digest_wait += 0.5
            continue
        if settled(rec, await client.transcript(rec.sid), await digest_revisions(redis_client, rec.sid)):
            return True
        n += 1
        p = await client.prompt(rec, f"flush:{rec.sid}:{n}")
        await client.wait_answer(rec, p)
        await asyncio.sleep(0.5)
    done = settled(rec, await client.transcript(rec.sid), await digest_revisions(redis_client, rec.sid))
    if not done and note is not None:
        # The evidence to tell slow from stuck: no flush prompt sent (the digest never caught up) is
        # the window; prompts answered while an entry stayed unrecorded is the runtime.
        note(f"{rec.sid}: not settled after {deadline_s:.0f}s: {n} flush prompts, {digest_wait:.1f}s waiting for the digest")
    return done
