"""`make run` starts the runtime once per worker (docs/architecture.md "Runtime workers"): one per core by default,
each on a port of its own, the other services once; each with the scripted model's factory wired."""

from __future__ import annotations

import os

from scripted.factory import SPEC
from scripted.settings import ScriptedSettings
from services.stack import CONNECTORS, SERVICES, service_envs
from shared.settings import Settings

FACTORY = {"GAMMA_MODEL_FACTORY": SPEC}


def test_one_runtime_per_core_by_default() -> None:
    envs = service_envs(Settings(GAMMA_RUNTIME_PORT=9002), ScriptedSettings())
    runtimes = [extra for name, extra in envs if name == "runtime"]
    assert len(runtimes) == (os.cpu_count() or 1)
    assert [n for n, _ in envs if n != "runtime"] == [*(s for s in SERVICES if s != "runtime"), *CONNECTORS]


def test_explicit_worker_count_gets_distinct_ports_and_instances() -> None:
    runtimes = [extra for name, extra in service_envs(Settings(GAMMA_RUNTIME_WORKERS=3, GAMMA_RUNTIME_PORT=9002),
                                                         ScriptedSettings()) if name == "runtime"]
    assert runtimes == [FACTORY, {**FACTORY, "GAMMA_RUNTIME_PORT": "9012", "GAMMA_INSTANCE": "runtime2"},
                        {**FACTORY, "GAMMA_RUNTIME_PORT": "9022", "GAMMA_INSTANCE": "runtime3"}]


def test_every_service_gets_the_scripted_factory_unless_one_is_named() -> None:
    envs = service_envs(Settings(), ScriptedSettings())
    assert all(extra.get("GAMMA_MODEL_FACTORY") == SPEC for name, extra in envs if name in SERVICES)
    assert all(extra == {} for name, extra in envs if name in CONNECTORS)  # a connector calls no model
    named = service_envs(Settings(GAMMA_MODEL_FACTORY="my.models:factory"), ScriptedSettings())
    assert all("GAMMA_MODEL_FACTORY" not in extra for _, extra in named)


def test_the_scripted_model_server_is_the_runtimes_provider_when_asked() -> None:
    envs = service_envs(Settings(GAMMA_RUNTIME_WORKERS=2, OPENAI_API_KEY=None),
                        ScriptedSettings(GAMMA_SCRIPTED_SERVER_PORT=8099))
    runtimes = [extra for name, extra in envs if name == "runtime"]
    assert all(e["OPENAI_BASE_URL"] == "http://127.0.0.1:8099/v1" and e["OPENAI_API_KEY"]
               and e["GAMMA_MODEL_API"] == "responses" for e in runtimes)
    # compaction keeps its own model
    assert all(extra == FACTORY for name, extra in envs if name != "runtime" and name in SERVICES)
    # a real key wins: no scripted server
    keyed = service_envs(Settings(GAMMA_RUNTIME_WORKERS=1, OPENAI_API_KEY="k"), ScriptedSettings(GAMMA_SCRIPTED_SERVER_PORT=8099))
    assert [extra for name, extra in keyed if name == "runtime"] == [FACTORY]
