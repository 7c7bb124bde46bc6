"""Usage read no more strictly than the SDK reads it (reference §5), through a real runtime session on
both APIs: the double's usage variants of compatible servers and Azure (no `cache_write_tokens`, no
details, `null`, no usage at all) never fail a reply, and what is reported is recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.runtime_support import script
from tests.integration.test_model_behaviours import session
from tests.support.model_runs import assistant_entries, prompt_and_wait

pytestmark = pytest.mark.timeout(120)


async def test_usage_variants_never_fail_a_reply(redis_url: str, tmp_path: Path) -> None:
    for api in ("responses", "chat"):
        async with session(api, redis_url, tmp_path / api) as (proc, sid):
            for variant in ("no_cache_write", "no_details", "null", "absent", "full"):
                answer = await prompt_and_wait(proc, sid, script({"content": f"usage {variant}", "usage": variant}))
                assert answer["message_user"]["message"] == f"usage {variant}", (api, variant, answer["errors"])
                assert not answer["errors"], (api, variant)
                usage = assistant_entries(tmp_path / api, sid)[-1]["usage"]
                reported = variant not in ("null", "absent")
                assert (usage["input"] > 0) == reported and usage["cacheWrite"] == 0, (api, variant, usage)
            requests = await proc.events(sid, "model_request")
            assert [r["attempts"] for r in requests] == [1] * 5 and "cache_write_tokens" in requests[-1]
