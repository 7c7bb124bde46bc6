"""When compaction happens and what becomes of its result, end to end (real runtime and compaction
processes, real Redis, a recording model): the threshold on its own and again, a context overflow
(compact, retry once), a result that arrives while the session is dormant, a duplicate, a stale
result, and a summarization model that fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scripted.reading import parse_summary
from scripted.types import ScriptedError
from services.runtime.model.convert import SUMMARY_PREFIX
from shared.contracts.streams.inbox import CompactionReady, Stop
from shared.redis import keys
from shared.storage.disk import session_paths
from shared.trust.trusted_blocks import escape_text
from tests.support.compaction_e2e import (
    Env,
    compact_now,
    compactions,
    phase_events,
    running_env,
    start,
    wait_phase,
    wait_runs,
)
from tests.support.compaction_model import call, done, reply, text_of
from tests.support.polling import wait_sync

pytestmark = pytest.mark.timeout(240)
WINDOW, RESERVE = 16_000, 2_000
OVERFLOW = ScriptedError(400, "context_length_exceeded",
                         "This model's maximum context length is 16000 tokens. However, your messages resulted "
                         "in 17210 tokens. Please reduce the length of the messages.")


@pytest.fixture(scope="module")
def env(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from running_env(module_redis_url, tmp_path_factory.mktemp("compaction-triggers"),
                           GAMMA_CONTEXT_WINDOW=str(WINDOW), GAMMA_RESERVE_TOKENS=str(RESERVE))


def write_notes(env: Env, sid: str, count: int, lines: int = 48) -> list[str]:
    """Workspace files of about 1,200 tokens each."""
    folder = session_paths(env.stack.data_dir, sid).workspace / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        text = "\n".join(f"Site {i} log {n}: the tidal turbine array held steady output through the spring tide "
                         f"and the crew logged no faults on shift {n}." for n in range(lines))
        (folder / f"part{i:02d}.md").write_text(text)
        paths.append(f"notes/part{i:02d}.md")
    return paths


def reads(paths: list[str]) -> list[object]:
    return [reply(call("read", path=p)) for p in paths]


def ready_entries(env: Env, sid: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return [(i, f) for i, f in env.d.r.xrange(keys.inbox(sid)) if f.get(b"type") == b"compaction_ready"]


def test_a_long_session_compacts_on_its_own_twice_and_survives_a_failing_summarizer(env: Env) -> None:
    sid = "long1"
    paths = write_notes(env, sid, 30)
    todo = [{"id": "t1", "content": "Read every site log", "status": "in_progress"},
            {"id": "t2", "content": "Summarize the faults per site", "status": "pending"}]
    env.model.agent_delay_s = 0.35  # a model takes time: the summary arrives within a step or two
    env.model.summary_failures = 3  # the first attempt fails (the client retries twice): ask again later
    env.model.script(reply(call("todo", items=todo)), *reads(paths), done("Read all 30 site logs."))
    try:
        start(env, sid, "Read all the site logs in notes/ and tell me which sites had faults.")
        applied = wait_phase(env, sid, "applied", n=2, timeout=120)
        wait_runs(env, sid, 1, timeout=120)
    finally:
        env.model.agent_delay_s = 0.0
    failed = [e for e in phase_events(env, sid, "stale") if e.get("error")]
    assert failed and "overloaded" in failed[0]["error"], "the failed summary is discarded with its error"
    assert len(phase_events(env, sid, "requested")) >= 3  # failed, first, second: all by the threshold
    for event in applied:
        assert event["tokensAfter"] < WINDOW - RESERVE < event["tokensBefore"]
    chain = compactions(env, sid)  # two or more: a slow machine may compact a third time before the run ends
    first, second = chain[:2]
    old, new = parse_summary(first["summary"]), parse_summary(second["summary"])
    assert "Read `notes/part00.md`" in old.get("### Done")
    assert all(item in new.get("### Done") for item in old.get("### Done")), "the second summary updates the first"
    assert len(new.get("### Done")) > len(old.get("### Done"))
    assert new.get("### In Progress") == ["Read every site log"]
    assert "notes/part00.md" in second["details"]["readFiles"]
    prompts = [text_of(s) for s in env.model.summaries]
    for earlier in chain[:-1]:  # each summary after the first was asked for as an update of the one before
        # quoted as the builder escapes a body: its file lists are reserved tags (docs/architecture.md
        # "Trust boundaries")
        assert any("<previous-summary>\n" + escape_text(earlier["summary"]) in p for p in prompts)
    last = text_of(env.model.requests[-1])
    assert last.count(SUMMARY_PREFIX) == 1 and "Read `notes/part00.md`" in last


def test_overflow_compacts_and_retries_once(env: Env) -> None:
    sid = "overflow1"
    paths = write_notes(env, sid, 3)
    env.model.script(*reads(paths), OVERFLOW, done("Done after the retry."))
    start(env, sid, "Read the three site logs.")
    wait_runs(env, sid, 1)
    requests = env.model.requests
    assert len(requests) == 5
    assert SUMMARY_PREFIX not in text_of(requests[3])
    assert SUMMARY_PREFIX in text_of(requests[4])  # the same call, retried on the compacted context
    assert len(compactions(env, sid)) == 1
    assert env.d.message_users(sid)[-1]["message"] == "Done after the retry."


def test_overflow_is_retried_only_once(env: Env) -> None:
    sid = "overflow2"
    paths = write_notes(env, sid, 3)
    env.model.script(*reads(paths), OVERFLOW, OVERFLOW)
    start(env, sid, "Read the three site logs.")
    wait_runs(env, sid, 1)
    assert len(env.model.requests) == 5  # three reads, the overflow, one retry: no third attempt
    assert len(compactions(env, sid)) == 1
    env.model.script(done("Still here."))
    env.d.prompt(sid, "Are you still there?")
    wait_runs(env, sid, 2)
    assert env.d.message_users(sid)[-1]["message"] == "Still here."


def test_result_while_dormant_is_applied_on_wake_then_duplicate_and_stale_are_not(env: Env) -> None:
    sid = "dormant1"
    paths = write_notes(env, sid, 3)
    env.model.script(*reads(paths), done("Read them."))
    start(env, sid, "Read the three site logs.")
    wait_runs(env, sid, 1)
    env.model.summary_delay_s = 3.0
    try:
        rid = compact_now(env, sid)
        stop = Stop(session_id=sid)
        env.d.append(stop)
        assert env.d.reply(sid, stop.request_id)["status"] == 200
        wait_sync(lambda: not env.d.live(sid), timeout=30, what="the session gone dormant")
        wait_sync(lambda: ready_entries(env, sid), timeout=30, what="the compaction result")
    finally:
        env.model.summary_delay_s = 0.0
    assert not env.d.live(sid) and compactions(env, sid) == []  # arrived while dormant: nothing applied yet

    env.model.script(done("Back again."))
    start(env, sid, "Where were we?")
    wait_runs(env, sid, 2)
    (entry,) = compactions(env, sid)
    assert entry["requestId"] == rid
    assert SUMMARY_PREFIX in text_of(env.model.requests[0])  # the wake's first request is compacted

    # the same result delivered again: applied once
    (_, fields), = ready_entries(env, sid)
    env.d.r.xadd(keys.inbox(sid), fields)
    wait_phase(env, sid, "duplicate")
    assert len(compactions(env, sid)) == 1

    # a result for entries a newer compaction already summarized: discarded
    ready = CompactionReady.model_validate_json(fields[b"data"])
    stale = ready.model_copy(update={"request_id": "cr_stale", "summary": "## Goal\n- an outdated summary"})
    env.d.append(stale)
    wait_phase(env, sid, "stale")
    assert len(compactions(env, sid)) == 1
    env.model.script(done("Still fine."))
    env.d.prompt(sid, "Anything else?")
    wait_runs(env, sid, 3)
    assert "an outdated summary" not in text_of(env.model.requests[-1])


def test_a_failed_summary_leaves_the_session_usable_and_a_later_request_succeeds(env: Env) -> None:
    sid = "failing1"
    paths = write_notes(env, sid, 3)
    env.model.script(*reads(paths), done("Read them."))
    start(env, sid, "Read the three site logs.")
    wait_runs(env, sid, 1)
    env.model.summary_failures = 3  # a call and the client's two retries
    compact_now(env, sid)
    (failed,) = [e for e in wait_phase(env, sid, "stale") if e.get("error")]
    assert "overloaded" in failed["error"] and compactions(env, sid) == []
    env.model.script(done("Answering without a compaction."))
    env.d.prompt(sid, "Still working?")
    wait_runs(env, sid, 2)
    compact_now(env, sid)  # nothing is in flight any more: a new request goes out
    wait_phase(env, sid, "applied")
    assert len(compactions(env, sid)) == 1
