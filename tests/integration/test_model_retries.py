"""Retries that scale and recovery from a poisoned history, through a real runtime session over both
APIs against the strict model-API double (docs/architecture.md "Model calls: retries and recovery";
reference note §4): quota errors are not retried, the body's "try again in" is honoured, an idle
stream is dropped and retried, and a replayed item the API refuses (encrypted reasoning, an image) is
repaired, recorded in the transcript, and the session keeps working on later turns."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from shared.history.history_repair import IMAGE_REMOVED
from shared.media.image_limits import ImageLimits
from shared.media.images import prepare, store_image
from tests.integration.runtime_inproc import InProc, inproc_worker
from tests.integration.runtime_support import script
from tests.support.model_runs import (
    FAST_RETRIES,
    assistant_entries,
    bodies,
    create_row,
    prompt_and_wait,
    transcript,
)

pytestmark = [pytest.mark.timeout(90)]
BOTH = pytest.mark.parametrize("api", ["responses", "chat"])


@asynccontextmanager
async def session(api: str, redis_url: str, tmp_path: Path, **env: object) -> AsyncIterator[tuple[InProc, str]]:
    async with inproc_worker(redis_url, tmp_path, **{**FAST_RETRIES, **env}) as proc:
        sid = f"retries-{api}"
        await create_row(proc, sid, api)
        await proc.live(sid)
        yield proc, sid


@BOTH
async def test_insufficient_quota_is_one_attempt(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script({"error": {"status": 429, "code": "insufficient_quota"}}))
        error = answer["errors"][-1]["error"]
        assert "insufficient_quota" in error and "attempts" not in error
        assert (await proc.events(sid, "model_request"))[-1]["attempts"] == 1
        assert not any(u.get("restart") for u in await proc.events(sid, "message_update"))


@BOTH
async def test_try_again_in_from_the_message_is_honoured(api: str, redis_url: str, tmp_path: Path) -> None:
    message = ("Rate limit reached for gpt-5-mini in organization org-x on tokens per min (TPM): Limit 30000, "
               "Used 29000, Requested 1200. Please try again in 600ms. Visit https://platform.openai.com.")
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script(
            {"error": {"status": 429, "code": "rate_limit_exceeded", "message": message}, "times": 1},
            {"content": "made it"}))
        assert answer["message_user"]["message"] == "made it" and not answer["errors"]
        (restart,) = [u for u in await proc.events(sid, "message_update") if u.get("restart")]
        # The wait the body asked for, plus jitter; never the 0.05 s backoff base.
        assert 0.6 <= float(restart["retryInS"]) <= 0.6 * 1.25 + 0.05  # type: ignore[arg-type]
        assert (await proc.events(sid, "model_request"))[-1]["attempts"] == 2


@BOTH
async def test_an_idle_stream_is_dropped_and_retried(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path, GAMMA_MODEL_STREAM_IDLE_S=0.3) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script({"content": "too late", "stall_s": 60, "stall_after": 1}))
        error = answer["errors"][-1]["error"]
        assert "no data from the model for 0.3 s" in error and "after 3 attempts" in error
        restarts = [u for u in await proc.events(sid, "message_update") if u.get("restart")]
        assert len(restarts) == 2 and all("no data" in str(u["reason"]) for u in restarts)
        assert assistant_entries(tmp_path, sid)[-1]["stopReason"] == "error"


def reasoning_ids(body: dict[str, Any]) -> list[str]:
    return [str(i.get("id")) for i in body.get("input") or [] if i.get("type") == "reasoning"]


async def test_refused_encrypted_reasoning_is_stripped_recorded_and_later_turns_work(
        redis_url: str, tmp_path: Path) -> None:
    async with session("responses", redis_url, tmp_path) as (proc, sid):
        first = await prompt_and_wait(proc, sid, script({"content": "one"}))
        assert first["message_user"]["message"] == "one"
        old = [c["item"]["id"] for m in assistant_entries(tmp_path, sid) for c in m["content"]
               if c["type"] == "thinking" and c.get("item")]
        assert old  # the first turn's reasoning is in the history
        # The key rotated (reference §1.8/1.9): the API refuses every replayed reasoning item.
        second = await prompt_and_wait(proc, sid, script({"reject_replayed": "reasoning", "content": "two"}))
        assert second["message_user"]["message"] == "two" and not second["errors"]
        sent = bodies(proc, "responses")
        assert set(old) <= set(reasoning_ids(sent[-2])) and not reasoning_ids(sent[-1])  # refused, then stripped
        repairs = [e for e in transcript(tmp_path, sid) if e["type"] == "history_repair"]
        assert [r["action"] for r in repairs] == ["strip_reasoning"] and "invalid_encrypted_content" in repairs[0]["error"]
        third = await prompt_and_wait(proc, sid, script({"content": "three"}))
        assert third["message_user"]["message"] == "three" and not third["errors"]
        assert not set(old) & set(reasoning_ids(bodies(proc, "responses")[-1]))  # the repair holds on later turns


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


def image_parts(body: dict[str, Any]) -> int:
    return str(body.get("input") or body.get("messages")).count("data:image/")


@BOTH
async def test_a_refused_image_is_replaced_and_the_session_continues(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        ref = store_image(tmp_path / "sessions" / sid, prepare(png(), ImageLimits()), "red.png")
        answer = await prompt_and_wait(proc, sid, script({"reject_replayed": "image", "content": "described"}),
                                       images=[ref])
        assert answer["message_user"]["message"] == "described" and not answer["errors"]
        sent = bodies(proc, api)
        assert image_parts(sent[-2]) == 1 and image_parts(sent[-1]) == 0 and IMAGE_REMOVED in str(sent[-1])
        entries = transcript(tmp_path, sid)
        (repair,) = [e for e in entries if e["type"] == "history_repair"]
        user = next(e for e in entries if e["type"] == "message" and e["message"]["role"] == "user")
        assert repair["action"] == "remove_images" and repair["targetIds"] == [user["id"]]
        answer = await prompt_and_wait(proc, sid, script({"reject_replayed": "image", "content": "next"}))
        assert answer["message_user"]["message"] == "next" and not answer["errors"]
        assert image_parts(bodies(proc, api)[-1]) == 0
