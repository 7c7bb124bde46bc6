"""Cache breakpoints and the cache-break alarm against the strict model double (docs/cache.md): real
runtime sessions in process, the scripted model simulating OpenAI's cache regime of each model
(scripted/breakpoint_cache.py from GPT-5.6 on, scripted/prompt_cache.py before)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from scripted.breakpoint_cache import positions
from services.proxy.rows import SessionRow
from services.runtime.app import skills_dir
from services.runtime.skillset.prompt import build_system_prompt, static_prefix
from services.runtime.skillset.skills import load_skills
from shared.contracts.http import ModelConfig
from shared.contracts.records.messages import Usage
from shared.redis import keys
from tests.contract.test_model_api import CHAT, RESPONSES, assert_exact
from tests.integration.runtime_inproc import InProc, inproc_worker
from tests.support.model_runs import assistant_entries, bodies, prompt_and_wait

pytestmark = pytest.mark.timeout(180)
ONE_KEY = {"GAMMA_PROMPT_CACHE_KEY_SHARDS": 1}  # every session of a variant under one key
VARIANT = "deck-generation"


async def start(proc: InProc, sid: str, api: str, model: str, variant: str = VARIANT) -> None:
    now = int(time.time() * 1000)
    row = SessionRow(id=sid, owner="u", variant=variant,  # type: ignore[arg-type]
                     model=ModelConfig(api=api, reasoning_effort="low", name=model), created_at=now, updated_at=now)
    await proc.redis.hset(keys.session_row(sid), mapping=row.to_hash())  # type: ignore[arg-type]
    await proc.live(sid)


def system_of(api: str, body: dict[str, Any]) -> dict[str, Any]:
    return body["input"][0] if api == "responses" else body["messages"][0]


def usages(proc: InProc, sid: str) -> list[Usage]:
    return [Usage.model_validate(e["usage"]) for e in assistant_entries(proc.data_dir, sid)]


def first_usage(proc: InProc, sid: str) -> Usage:
    return usages(proc, sid)[0]


def misses(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e.get("event") == "model_cache_miss"]


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_gpt56_sessions_mark_both_prefixes_and_a_new_session_hits_them(api: str, redis_url: str,
                                                                             tmp_path: Path) -> None:
    skills = load_skills(skills_dir())
    static, whole = static_prefix(skills), build_system_prompt(VARIANT, skills)
    async with inproc_worker(redis_url, tmp_path, **ONE_KEY) as proc:
        with capture_logs() as logs:
            await start(proc, "bp-one", api, "gpt-5.6-sol")
            await prompt_and_wait(proc, "bp-one", "Create a presentation about tides")
            first_session = bodies(proc, api)
            await start(proc, "bp-two", api, "gpt-5.6-sol")
            await prompt_and_wait(proc, "bp-two", "Create a presentation about volcanoes")
        sent = bodies(proc, api)
        second = sent[len(first_session)]
        assert len(first_session) >= 4
        for body in sent:
            assert_exact(RESPONSES if api == "responses" else CHAT, body)  # the SDK's own types
            blocks = system_of(api, body)["content"]
            assert [b["text"] for b in blocks] == [static, whole[len(static):]]  # the static prefix, the variant
            assert all(b["prompt_cache_breakpoint"] == {"mode": "explicit"} for b in blocks)
            assert body["prompt_cache_options"] == {"ttl": "30m"} and "prompt_cache_retention" not in body
            assert "instructions" not in body
        assert system_of(api, second) == system_of(api, first_session[0])  # byte-identical across sessions
        one, two = first_usage(proc, "bp-one"), first_usage(proc, "bp-two")
        marks = [p.tokens for p in positions(api, second) if p.explicit]
        assert one.cache_read == 0 and one.cache_write >= marks[-1]  # the first session writes them
        assert two.cache_read >= marks[-1] >= marks[0]  # the second reads the static prefix and the variant
        assert two.cache_write < two.input - marks[-1] + 64  # and writes only its own tail
        assert all(u.cache_read >= marks[-1] for u in usages(proc, "bp-one")[1:])  # within the session: read every turn
        assert misses(logs) == []  # a normal session raises no cache-break alarm


async def test_gpt5_requests_carry_no_cache_fields(redis_url: str, tmp_path: Path) -> None:
    """Models before 5.6 get today's requests (tests/unit/test_request_golden.py pins them byte for byte)."""
    skills = load_skills(skills_dir())
    async with inproc_worker(redis_url, tmp_path, **ONE_KEY) as proc:
        await start(proc, "old-one", "responses", "gpt-5")
        await prompt_and_wait(proc, "old-one", "Create a presentation about tides")
        await start(proc, "old-two", "responses", "gpt-5")
        await prompt_and_wait(proc, "old-two", "Create a presentation about volcanoes")
        sent = bodies(proc, "responses")
        assert all(b["instructions"] == build_system_prompt(VARIANT, skills) for b in sent)
        assert not any("prompt_cache" in k for b in sent for k in b if k != "prompt_cache_key")
        assert "prompt_cache_breakpoint" not in str(sent)
        assert first_usage(proc, "old-two").cache_read >= 1024  # prefix regime: the shared key meets the prefix


@pytest.mark.parametrize("model", ["gpt-5.6-sol", "gpt-5"])
async def test_the_alarm_names_an_edited_static_prefix(model: str, redis_url: str, tmp_path: Path) -> None:
    async with inproc_worker(redis_url, tmp_path, **ONE_KEY) as proc:
        with capture_logs() as logs:
            await start(proc, "edit-one", "responses", model)
            await prompt_and_wait(proc, "edit-one", "Create a presentation about tides")
            assert misses(logs) == []
            # A prompt edit reaching the same cache keys (a deploy): the second session's prefix differs.
            worker = proc.worker
            edited = worker.static_prefix.replace("You are the Gamma agent.", "You are Gamma's agent.", 1)
            assert edited != worker.static_prefix
            worker.system_prompts[VARIANT] = edited + worker.system_prompts[VARIANT][len(worker.static_prefix):]
            worker.static_prefix = edited
            await start(proc, "edit-two", "responses", model)
            await prompt_and_wait(proc, "edit-two", "Create a presentation about volcanoes")
        found = misses(logs)
        assert found and found[0]["session_id"] == "edit-two" and found[0]["request"] == 1
        assert found[0]["diverged"] == "static_prefix" and found[0]["variant"] == VARIANT
        assert found[0]["missed"] >= 1024 and found[0]["family"] == ("gpt-5.6" if model == "gpt-5.6-sol" else "gpt-5")
        assert {m["session_id"] for m in found} == {"edit-two"}  # its later turns read their own prefix
