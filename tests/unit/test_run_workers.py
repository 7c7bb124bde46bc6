"""`make run` starts the runtime once per worker (issue 20): one per core by default, each on a
port of its own, the other services once."""

from __future__ import annotations

import os

from services.stack import CONNECTORS, SERVICES, service_envs
from shared.settings import Settings


def test_one_runtime_per_core_by_default() -> None:
    envs = service_envs(Settings(GAMMA_RUNTIME_PORT=9002))
    runtimes = [extra for name, extra in envs if name == "runtime"]
    assert len(runtimes) == (os.cpu_count() or 1)
    assert [n for n, _ in envs if n != "runtime"] == [*(s for s in SERVICES if s != "runtime"), *CONNECTORS]


def test_explicit_worker_count_gets_distinct_ports_and_instances() -> None:
    runtimes = [extra for name, extra in service_envs(Settings(GAMMA_RUNTIME_WORKERS=3, GAMMA_RUNTIME_PORT=9002))
                if name == "runtime"]
    assert runtimes == [{}, {"GAMMA_RUNTIME_PORT": "9012", "GAMMA_INSTANCE": "runtime2"},
                        {"GAMMA_RUNTIME_PORT": "9022", "GAMMA_INSTANCE": "runtime3"}]


def test_the_scripted_model_server_is_the_runtimes_provider_when_asked() -> None:
    envs = service_envs(Settings(GAMMA_RUNTIME_WORKERS=2, GAMMA_SCRIPTED_SERVER_PORT=8099, OPENAI_API_KEY=None))
    runtimes = [extra for name, extra in envs if name == "runtime"]
    assert all(e["OPENAI_BASE_URL"] == "http://127.0.0.1:8099/v1" and e["OPENAI_API_KEY"]
               and e["GAMMA_MODEL_API"] == "responses" for e in runtimes)
    assert all(extra == {} for name, extra in envs if name != "runtime")  # compaction keeps its own model
    # a real key wins: no scripted server
    keyed = service_envs(Settings(GAMMA_RUNTIME_WORKERS=1, GAMMA_SCRIPTED_SERVER_PORT=8099, OPENAI_API_KEY="k"))
    assert [extra for name, extra in keyed if name == "runtime"] == [{}]
