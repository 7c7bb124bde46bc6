"""One runtime (+ proxy) stack per sandbox layer the machine supports, shared by a test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.runtime.sandbox import Layer, SandboxLimits, probe_layer
from services.runtime.skillset.paths import sandbox_skills_dir
from tests.support.needs import needs
from tests.support.stack import Stack

LAYERS: tuple[Layer, ...] = ("bwrap", "landlock")
MAX_PROCS = 64
QUOTA_BYTES = 4 * 1024 * 1024
QUOTA_FILES = 100
TMP_BYTES = 16 * 1024 * 1024


def layer_params() -> list[object]:
    """bwrap is installed by .ci/run (a failure under CI when it does not work); Landlock is the kernel's,
    which no install brings (a skip)."""
    out: list[object] = []
    for layer in LAYERS:
        why = probe_layer(layer, SandboxLimits(), sandbox_skills_dir())
        reason = None if why is None else f"{layer}: {why}"
        mark = needs(reason) if layer == "bwrap" else pytest.mark.skipif(why is not None, reason=str(reason))
        out.append(pytest.param(layer, marks=mark))
    return out


@pytest.fixture(scope="module", params=layer_params())
def sandbox_stack(request: pytest.FixtureRequest, module_redis_url: str,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    layer = request.param
    stack = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp(f"sbx-{layer}"),
                  env_overrides={"GAMMA_SANDBOX": layer, "GAMMA_SANDBOX_MAX_PROCS": str(MAX_PROCS),
                                 "GAMMA_WORKSPACE_MAX_BYTES": str(QUOTA_BYTES),
                                 "GAMMA_WORKSPACE_MAX_FILES": str(QUOTA_FILES), "GAMMA_IDLE_S": "120",
                                 "GAMMA_SANDBOX_TMP_BYTES": str(TMP_BYTES)})
    stack.layer = layer
    try:
        stack.start("runtime", "proxy")
        yield stack
    finally:
        stack.stop()


def workspace(stack: Stack, sid: str) -> Path:
    return Path(stack.data_dir) / "sessions" / sid / "workspace"
