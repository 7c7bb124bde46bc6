"""The strict model-API double under a real runtime session (scripted/README.md "Strictness"): the
default configuration against it, and a request the real API refuses failing the run that sent it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.runtime_inproc import inproc_worker
from tests.integration.runtime_support import call, done, script
from tests.support.model_runs import FAST_RETRIES, create_row, prompt_and_wait

pytestmark = pytest.mark.timeout(120)
TOOL_THEN_DONE = script({"tool_calls": [call("write", path="notes.md", content="hello")]}, done("written"))


async def _default_session(api: str, redis_url: str, tmp_path: Path) -> dict[str, object]:
    async with inproc_worker(redis_url, tmp_path, **FAST_RETRIES) as proc:
        await create_row(proc, "default", api, effort=None)  # GAMMA_MODEL's default, no effort: as shipped
        await proc.live("default")
        return await prompt_and_wait(proc, "default", TOOL_THEN_DONE)


async def test_the_default_configuration_over_chat_completes_a_tool_call_session(redis_url: str,
                                                                                 tmp_path: Path) -> None:
    answer = await _default_session("chat", redis_url, tmp_path)
    assert not answer["errors"] and answer["message_user"]["message"] == "written"


async def test_the_default_configuration_over_responses_completes_a_tool_call_session(redis_url: str,
                                                                                      tmp_path: Path) -> None:
    """reference §1.1-1.3: the default model reasons at its default effort; a reasoning item asked without
    `include` would come back id-only, and its replay under `store:false` is a 404 on the second call."""
    answer = await _default_session("responses", redis_url, tmp_path)
    assert not answer["errors"] and answer["message_user"]["message"] == "written"


async def test_an_unknown_model_fails_the_run_as_the_api_refuses_it(redis_url: str, tmp_path: Path) -> None:
    async with inproc_worker(redis_url, tmp_path, **FAST_RETRIES) as proc:
        await create_row(proc, "unknown", "responses", name="gpt-imaginary")
        await proc.live("unknown")
        answer = await prompt_and_wait(proc, "unknown", script({"content": "never"}))
        errors = answer["errors"]
        assert errors and "The model `gpt-imaginary` does not exist" in str(errors[-1])
