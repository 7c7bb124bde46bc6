"""A deck's first digest when a revision before it never produced an `ArtifactChange` (real stack).

The fault suites (tests/reliability/test_faults.py, the cluster fault test, `bench-e2e --cluster`)
saw "deck revisions 0..1 never delivered" with the digest's `seen` past 1: a live deck PUT was
applied by the runtime (revision 1) but its reply never reached a waiting proxy (504 after
`GAMMA_REPLY_TIMEOUT_S`, the proxy killed, or the runtime killed after applying and the next holder
applying the redelivered entry again), so no `ArtifactChange` was published for revision 1. The
client's retry made revision 2, published `from_revision=1`; with no revision seen yet the digest took
that as its own `from_revision` and told the agent "from revision 1" about a deck it had never shown.
"""

from __future__ import annotations

import json
import time

import httpx
import redis

from shared.contracts.streams.inbox import DocumentEdit, InboxReply
from shared.redis import keys
from tests.reliability.workload import (
    DECK,
    DECK_REF,
    Audit,
    PromptRecord,
    SessionRecord,
    answered_tokens,
    artifact_spans,
    audit_session,
)
from tests.support.polling import wait_sync
from tests.support.stack import Stack


def transcript(api: httpx.Client, sid: str) -> list[dict[str, object]]:
    return list(api.get(f"/sessions/{sid}/transcript").json()["entries"])


def ask(api: httpx.Client, rec: SessionRecord, token: str) -> None:
    resp = api.post(f"/sessions/{rec.sid}/messages", json={"message": f"load prompt {token}"})
    assert resp.status_code == 202, resp.text
    rec.prompts.append(PromptRecord(token=token, sent_at=time.time(), prompt_id=resp.json()["prompt_id"]))
    wait_sync(lambda: token in answered_tokens(transcript(api, rec.sid)), timeout=60, interval=0.25,
              what=f"an answer to {token}")


def revisions(r: redis.Redis, sid: str, field: str) -> dict[str, int]:
    return {k.decode(): int(json.loads(v)[field]) for k, v in r.hgetall(keys.revisions(sid)).items()
            if json.loads(v).get(field) is not None}


def deck_digests(api: httpx.Client, sid: str) -> list[dict[str, object]]:
    return [e for e in transcript(api, sid) if e.get("type") == "custom_message"
            and str((e.get("details") or {}).get("sourceId", "")).startswith(DECK_REF + "@")]


def test_first_deck_digest_after_an_unanswered_write_starts_from_nothing(
    api: httpx.Client, r: redis.Redis, module_stack: Stack
) -> None:
    rec = SessionRecord(sid=str(api.post("/sessions").json()["id"]))
    ask(api, rec, "[first:00000001]")  # wakes the session

    # A deck PUT the proxy forwarded and then stopped waiting for: the runtime applies it, but nobody
    # publishes its change (the proxy publishes only after it reads the reply).
    lost = DocumentEdit(session_id=rec.sid, doc=DECK, op="put",
                        document={"title": "Load deck", "cards": [{"id": "c0", "title": "Start"}]})
    r.xadd(keys.inbox(rec.sid), {"type": lost.type, "data": lost.model_dump_json(by_alias=True)})
    got = r.blpop([keys.reply(rec.sid, lost.request_id)], timeout=30)
    assert got is not None and InboxReply.model_validate_json(got[1]).body["revision"] == 1

    # The client's retry is acknowledged as revision 2.
    sent = time.time()
    resp = api.put(f"/sessions/{rec.sid}/documents/{DECK}",
                   json={"title": "Load deck", "cards": [{"id": "c0", "title": "Start"}]})
    assert resp.status_code == 200 and resp.json()["revision"] == 2, resp.text
    rec.edits[DECK_REF] = [sent]
    wait_sync(lambda: revisions(r, rec.sid, "current").get(DECK_REF) == 2, timeout=30, what="the digest at 2")

    ask(api, rec, "[after:00000002]")  # the digest precedes the prompt (causal order)
    wait_sync(lambda: revisions(r, rec.sid, "seen").get(DECK_REF) == 2, timeout=30, what="the digest recorded")

    [digest] = deck_digests(api, rec.sid)
    content = str(digest["content"])
    # From nothing (revision 1 was never shown), not "from revision 1", which recorded made it seen.
    assert artifact_spans([digest], DECK_REF) == [(0, 2)], content

    audit = Audit()
    audit_session(rec, module_stack.data_dir / "sessions" / rec.sid, audit, revisions(r, rec.sid, "current"),
                  set(), revisions(r, rec.sid, "seen"))
    assert audit.misacknowledged == [] and audit.losses == [] and audit.duplicates == [], audit.summary()
