"""The compaction service alone, as a real process on real Redis: a `CompactionRequest` for a transcript
on disk comes back as one `CompactionReady` in the session inbox, also after a crash mid-request."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scripted.reading import parse_summary
from services.runtime.runs import compaction_trigger as c
from shared.contracts.streams.compaction import CompactionRequest
from shared.contracts.streams.inbox import CompactionReady
from shared.redis import keys
from shared.storage.disk import session_paths
from tests.conftest import fresh_db_url
from tests.support.compaction_sessions import SessionBuilder, deck_session
from tests.support.polling import wait_sync
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(180)


def _start(redis_base: str, tmp: Path, **env: str) -> tuple[Stack, redis.Redis]:
    stack = Stack(redis_url=fresh_db_url(redis_base), data_dir=tmp, env_overrides=env)
    stack.start("compaction")
    return stack, redis.Redis.from_url(stack.redis_url)


@pytest.fixture(scope="module")
def service(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, redis.Redis]]:
    stack, client = _start(redis_base, tmp_path_factory.mktemp("compaction"))
    yield stack, client
    stack.stop()
    client.close()


@pytest.fixture(scope="module")
def slow_service(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, redis.Redis]]:
    """A summarizer that takes 4 s per call (longer than the claim idle time) and fails its first call."""
    stack, client = _start(redis_base, tmp_path_factory.mktemp("compaction-slow"),
                           GAMMA_COMPACTION_SCRIPTED_DELAY_S="4", GAMMA_COMPACTION_SCRIPTED_FAILURES="1")
    yield stack, client
    stack.stop()
    client.close()


def publish(client: redis.Redis, request: CompactionRequest) -> None:
    client.xadd(keys.COMPACTION_REQUESTS, {"data": request.model_dump_json()})


def results(client: redis.Redis, sid: str) -> list[CompactionReady]:
    out = []
    for _, fields in client.xrange(keys.inbox(sid)):
        if fields.get(b"type") == b"compaction_ready":
            out.append(CompactionReady.model_validate_json(fields[b"data"]))
    return out


def wait_results(client: redis.Redis, sid: str, n: int = 1, timeout: float = 60) -> list[CompactionReady]:
    return wait_sync(lambda: found if len(found := results(client, sid)) >= n else None, timeout=timeout,
                     what=f"{sid}: {n} results", detail=lambda: f"{len(results(client, sid))} results")


def session_on_disk(stack: Stack, sid: str, builder: SessionBuilder) -> tuple[CompactionRequest, str]:
    path = builder.write(stack.data_dir, sid)
    request = c.make_request(sid, builder.entries, keep_recent_tokens=800)
    assert request is not None
    return request, hashlib.sha256(path.read_bytes()).hexdigest()


def log_events(stack: Stack, event: str, **match: Any) -> list[dict[str, Any]]:
    out = []
    for line in stack.log("compaction").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event and all(record.get(k) == v for k, v in match.items()):
            out.append(record)
    return out


def test_request_becomes_a_summary_in_the_inbox(service: tuple[Stack, redis.Redis]) -> None:
    stack, client = service
    sid = "svc-basic"
    request, digest = session_on_disk(stack, sid, deck_session(sections=6, words=300))
    publish(client, request)
    (ready,) = wait_results(client, sid)
    assert ready.error is None and ready.request_id == request.request_id
    assert (ready.first_kept_entry_id, ready.upto_entry_id) == (request.first_kept_entry_id, request.upto_entry_id)
    assert ready.tokens_before == request.tokens_before
    sections = parse_summary(ready.summary)
    assert any("Acme Robotics" in g for g in sections.get("## Goal"))
    assert "Wrote `cards/01.gml`" in sections.get("### Done")
    assert "brief.md" in ready.details["readFiles"] and "cards/01.gml" in ready.details["modifiedFiles"]
    assert "<modified-files>\ncards/01.gml" in ready.summary
    # read-only: the transcript is untouched and no file was added to the session
    paths = session_paths(stack.data_dir, sid)
    assert hashlib.sha256(paths.transcript.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in paths.root.iterdir()) == ["transcript.jsonl"]
    # A result is published before its ack (the effect is durable first): the ack follows shortly.
    wait_sync(lambda: not client.xpending(keys.COMPACTION_REQUESTS, "compaction")["pending"], timeout=10,
              what="the request acked")


def test_second_compaction_updates_the_first_summary(service: tuple[Stack, redis.Redis]) -> None:
    stack, client = service
    sid = "svc-iterative"
    b = deck_session(sections=5, words=300)
    request, _ = session_on_disk(stack, sid, b)
    publish(client, request)
    (first,) = wait_results(client, sid)
    b.compaction(first.summary, first.first_kept_entry_id, first.request_id, first.details)
    b.anchor("gamma.todo_anchor", "<todo_state revision=\"6\">...</todo_state>")
    deck_session(sections=3, words=300, builder=b)
    second_request, _ = session_on_disk(stack, sid, b)
    assert second_request.previous_summary == first.summary
    publish(client, second_request)
    _, second = wait_results(client, sid, n=2)
    old, new = parse_summary(first.summary), parse_summary(second.summary)
    assert all(item in new.get("### Done") for item in old.get("### Done"))
    assert set(first.details["modifiedFiles"]) <= set(second.details["modifiedFiles"])
    assert second.summary.count("## Goal") == 1


def test_duplicate_request_answers_once_and_stale_request_answers_with_an_error(
    service: tuple[Stack, redis.Redis],
) -> None:
    stack, client = service
    sid = "svc-dup"
    request, _ = session_on_disk(stack, sid, deck_session(sections=4, words=300))
    publish(client, request)
    publish(client, request)
    wait_results(client, sid)
    # Both handled and acked (a result is published before its ack): the duplicate answered nothing.
    wait_sync(lambda: not client.xpending(keys.COMPACTION_REQUESTS, "compaction")["pending"], timeout=10,
              what="both requests acked")
    assert len(results(client, sid)) == 1
    stale = request.model_copy(update={"request_id": "cr_stale", "first_kept_entry_id": "nope"})
    publish(client, stale)
    _, answer = wait_results(client, sid, n=2)
    assert answer.request_id == "cr_stale" and answer.error and "stale" in answer.error


def test_model_error_then_success_and_slow_model_is_not_processed_twice(
    slow_service: tuple[Stack, redis.Redis],
) -> None:
    stack, client = slow_service
    sid = "svc-error"
    request, _ = session_on_disk(stack, sid, deck_session(sections=4, words=300))
    publish(client, request)
    (failed,) = wait_results(client, sid)
    assert failed.error and "unavailable" in failed.error and failed.summary == ""
    retry = request.model_copy(update={"request_id": "cr_retry"})
    publish(client, retry)
    _, ok = wait_results(client, sid, n=2)
    assert ok.error is None and "## Goal" in ok.summary
    # 4 s of model time against a 1.5 s claim idle time: the claimer never took the entry over
    assert len(log_events(stack, "compaction_started", request_id="cr_retry")) == 1


def test_sigkill_mid_request_is_reclaimed_and_answered_once(slow_service: tuple[Stack, redis.Redis]) -> None:
    stack, client = slow_service
    sid = "svc-kill"
    request, _ = session_on_disk(stack, sid, deck_session(sections=4, words=300))
    publish(client, request)
    wait_sync(lambda: log_events(stack, "compaction_started", request_id=request.request_id), timeout=30,
              interval=0.05, what="the request to start")
    stack.kill("compaction")
    assert results(client, sid) == []
    assert client.xpending(keys.COMPACTION_REQUESTS, "compaction")["pending"] == 1
    stack.env_overrides["GAMMA_COMPACTION_SCRIPTED_FAILURES"] = "0"  # a fresh process fails its first call
    stack.start("compaction")
    (ready,) = wait_results(client, sid, timeout=60)
    assert ready.request_id == request.request_id and ready.error is None
    time.sleep(2.5)  # longer than the claim idle time: nothing is processed a second time
    assert len(results(client, sid)) == 1
    assert client.xpending(keys.COMPACTION_REQUESTS, "compaction")["pending"] == 0
    assert client.xlen(keys.DEADLETTER) == 0


def test_an_unreadable_transcript_is_answered_with_an_error(service: tuple[Stack, redis.Redis]) -> None:
    stack, client = service
    sid = "svc-unreadable"
    path = session_paths(stack.data_dir, sid).transcript
    path.mkdir(parents=True)  # a directory where the file should be: reading it fails
    request = CompactionRequest(session_id=sid, upto_entry_id="a", first_kept_entry_id="a")
    publish(client, request)
    (ready,) = wait_results(client, sid)
    assert ready.error and "compaction failed" in ready.error
    assert client.xlen(keys.DEADLETTER) == 0
