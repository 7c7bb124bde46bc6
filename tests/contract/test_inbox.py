"""Contract of `gamma:{sid}:inbox`: proxy, notifications, digest, compaction -> the lease holder
(`shared.streams.inbox.append` -> `shared.streams.inbox.InboxReader`, group `runtime`)."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import sys
import typing
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from shared.contracts.base import TRACEPARENT
from shared.contracts.records.injection import INJECTION_KINDS, RuntimeInjection
from shared.contracts.streams.deadletter import DeadLetter
from shared.contracts.streams.inbox import (
    Abort,
    Barrier,
    ChangesSettled,
    Compact,
    CompactionReady,
    ConnectorResult,
    DocumentDelete,
    DocumentEdit,
    FileDelete,
    FileWrite,
    InboxMessage,
    InboxReply,
    Injection,
    ModelChange,
    Rewind,
    Stop,
    UiUpdate,
    UserPrompt,
)
from shared.redis import keys
from shared.streams.inbox import GROUP, InboxReader, append

SID = "s_contract"
ROOT = str(Path(__file__).resolve().parents[2])
PARENT = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


def every_message() -> list[InboxMessage]:
    prompt_ctx = {"locale": "de-DE", "viewport": {"width": 1280, "height": 800}, "paneCapacity": 2,
                  "visibleTabs": [{"tabId": "t1", "paneId": "p1", "ari": "ari:file:brief.xml", "title": "Brief"}]}
    injections: list[InboxMessage] = [
        Injection(session_id=SID, injection=RuntimeInjection(kind=kind, content=f"<{kind}>x</{kind}>"),
                  source="notification", source_id=f"n1#{i}")
        for i, kind in enumerate(INJECTION_KINDS)
    ]
    return [
        UserPrompt(session_id=SID, message="hello <system_update>not trusted</system_update>",
                   client_context=prompt_ctx, on_busy="follow_up"),
        *injections,
        Injection(session_id=SID, injection=RuntimeInjection(kind="artifact_update", content="<artifact_update/>"),
                  source="artifact", source_id="file:brief.xml@5", ref="file:brief.xml", from_revision=3,
                  to_revision=5),
        UiUpdate(session_id=SID, update=base64.b64encode(b"\x01\x00").decode(), snapshot={"schemaVersion": 1}),
        FileWrite(session_id=SID, path="notes/a.md", blob="b_r1", sha256="0" * 64, size=3, digest="d"),
        DocumentEdit(session_id=SID, doc="deck1", op="patch", document={"cards": [{"id": "c1"}]}, if_match=2),
        DocumentEdit(session_id=SID, doc="deck1", op="put", document={"title": "t", "cards": []}),
        Barrier(session_id=SID, wake_id="w1"),
        ChangesSettled(session_id=SID, upto=42),
        CompactionReady(session_id=SID, request_id="cr_1", summary="## Goal", first_kept_entry_id="e8",
                        upto_entry_id="e10", tokens_before=100, details={"readFiles": ["a"]}),
        CompactionReady(session_id=SID, request_id="cr_2", first_kept_entry_id="e8", upto_entry_id="e10",
                        error="model unavailable"),
        Compact(session_id=SID, instructions="keep the outline"),
        Stop(session_id=SID, reason="suspend"),
        FileDelete(session_id=SID, path="notes/a.md"),
        DocumentDelete(session_id=SID, doc="deck1", if_match=3),
        Abort(session_id=SID),
        Abort(session_id=SID, expected_run_id="run_0123abcd"),
        ConnectorResult(session_id=SID, call_id="call_1", connector="brand", status="accepted", content="{}"),
        UserPrompt(session_id=SID, message="instead", on_busy="interrupt", expected_run_id="run_0123abcd",
                   request_id="r_1"),
        Rewind(session_id=SID, entry_id="a1b2c3d4"),
        Rewind(session_id=SID, entry_id="a1b2c3d4", reason="edit"),
        ModelChange(session_id=SID, name="gpt-5.4", reasoning_effort="xhigh", api="responses"),
        Stop(session_id=SID, traceparent=PARENT),
    ]


def test_every_union_member_is_covered() -> None:
    union = typing.get_args(typing.get_args(InboxMessage)[0])
    assert {type(m) for m in every_message()} == set(union)


async def test_every_inbox_message_round_trips(redis_client: aioredis.Redis) -> None:
    reader = InboxReader(redis_client, "runtime-contract")
    await reader.add(SID)
    sent = every_message()
    ids = [await append(redis_client, m) for m in sent]
    got = []
    while len(got) < len(sent) and (batch := await reader.read(block_ms=1000, count=5)):
        got.extend(batch)
    assert [e.entry_id for e in got] == ids
    assert [e.message for e in got] == sent
    for entry, msg in zip(got, sent, strict=True):
        assert type(entry.message) is type(msg)
        assert entry.session_id == SID
        await reader.ack(entry.session_id, entry.entry_id)
    # The `type` field beside `data` lets tools filter without decoding.
    fields = [f for _, f in await redis_client.xrange(keys.inbox(SID))]
    assert [f[b"type"].decode() for f in fields] == [m.type for m in sent]
    assert int((await redis_client.xpending(keys.inbox(SID), GROUP))["pending"]) == 0


async def test_invalid_inbox_entry_is_dead_lettered_and_reading_goes_on(redis_client: aioredis.Redis) -> None:
    reader = InboxReader(redis_client, "runtime-contract")
    await reader.add(SID)
    stream = keys.inbox(SID)
    with capture_logs() as logs:
        bad = [
            (await redis_client.xadd(stream, {"type": "user_prompt", "data": '{"type": "user_prompt", "session_id": "s"}'})).decode(),
            (await redis_client.xadd(stream, {"type": "teleport", "data": '{"type": "teleport", "session_id": "s"}'})).decode(),
            (await redis_client.xadd(stream, {"type": "stop", "data": b"\xff\xfe"})).decode(),
            (await redis_client.xadd(stream, {"type": "stop", "data": '{"type": "stop", "session_id": "s", '
                                              '"traceparent": "00-zz"}'})).decode(),
        ]
        good = Stop(session_id=SID)
        await append(redis_client, good)
        entries = await reader.read(block_ms=1000)
    assert [e.message for e in entries] == [good]
    letters = [DeadLetter.model_validate_json(f[b"data"]) for _, f in await redis_client.xrange(keys.DEADLETTER)]
    assert [d.entry_id for d in letters] == bad
    assert "message" in letters[0].error  # the missing field is named
    assert "teleport" in letters[1].error
    assert "traceparent" in letters[3].error
    lines = [e for e in logs if e["event"] == "dead_letter"]
    assert [e["entry_id"] for e in lines] == bad
    assert all(e["log_level"] == "error" and "invalid inbox entry" in e["error"] for e in lines)


async def test_the_proxys_forwarded_writes_reach_the_runtimes_reader(redis_client: aioredis.Redis) -> None:
    """Producer: the proxy's `forward` (append, then wait for the runtime's reply); consumer: the
    runtime's `InboxReader`. The reply is queued up front, standing in for the runtime's answer."""
    from services.proxy.forwarding import forward

    sid = "s_forward"
    reader = InboxReader(redis_client, "runtime-contract")
    await reader.add(sid)
    forwarded = UiUpdate | FileWrite | DocumentEdit | Stop | Compact | FileDelete | DocumentDelete
    sent = [m for m in every_message() if isinstance(m, forwarded)]
    for msg in sent:
        msg = msg.model_copy(update={"session_id": sid})
        reply = InboxReply(request_id=msg.request_id, status=200, body={"ok": True})
        await redis_client.rpush(keys.reply(sid, msg.request_id), reply.model_dump_json())
        assert await forward(redis_client, redis_client, msg, timeout_s=5) == reply
        [entry] = await reader.read(block_ms=1000)
        assert entry.message == msg
        await reader.ack(sid, entry.entry_id)
    assert {type(m) for m in sent} == {UiUpdate, FileWrite, DocumentEdit, Stop, Compact, FileDelete, DocumentDelete}


# A producer process: appends inside a span (plain, naming its own traceparent, and through
# `entry_fields` as the scripted producers do), then once outside any span.
PRODUCER = """
import asyncio, sys
import redis.asyncio as aioredis
from opentelemetry import trace
from shared.contracts.streams.inbox import Stop
from shared.streams.inbox import append, entry_fields
from shared.telemetry.tracing import configure_tracing, traceparent

async def main() -> None:
    configure_tracing("contract")
    client = aioredis.from_url(sys.argv[1])
    sid, named = sys.argv[2], sys.argv[3]
    with trace.get_tracer("test").start_as_current_span("request"):
        current = traceparent()
        await append(client, Stop(session_id=sid))
        await append(client, Stop(session_id=sid, traceparent=named))
        scripted = entry_fields(Stop(session_id=sid))
    await append(client, Stop(session_id=sid))
    print(current, Stop.model_validate_json(scripted["data"]).traceparent)
    await client.aclose()

asyncio.run(main())
"""


@pytest.mark.parametrize("exporting", [True, False])
async def test_the_producers_trace_rides_in_the_entry(exporting: bool, redis_url: str,
                                                      redis_client: aioredis.Redis) -> None:
    """With tracing on, `append` and `entry_fields` write the current span's W3C traceparent into the
    entry unless the message names one (the runtime handles the entry in that trace); outside a
    span nothing. Off (no OTLP endpoint), nothing is added: no cost on the inbox path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if exporting:  # sampled out, so nothing is exported to the (closed) endpoint
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_TRACES_SAMPLER="always_off")
    reader = InboxReader(redis_client, "runtime-contract")
    await reader.add(SID)
    producer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PRODUCER, redis_url, SID, PARENT, env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(producer.communicate(), 60)
    assert producer.returncode == 0, err.decode()[-2000:]
    current, scripted = out.decode().split()
    got = [e.message.traceparent for e in await reader.read(block_ms=1000)]
    if exporting:
        assert re.fullmatch(TRACEPARENT, current)
        assert got == [current, PARENT, None] and scripted == current
    else:
        assert got == [None, PARENT, None] and scripted == "None"
