"""Driving the runtime and compaction processes with a recording model (compaction end-to-end tests)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.streams.inbox import Barrier, Compact, Injection
from shared.storage.disk import session_paths
from tests.integration.runtime_support import Driver
from tests.support.compaction_model import RecordingModel
from tests.support.polling import wait_sync
from tests.support.stack import Stack


@dataclass
class Env:
    stack: Stack
    model: RecordingModel
    d: Driver


def running_env(redis_url: str, data_dir: Path, **env: str) -> Iterator[Env]:
    """The runtime and the compaction service against a recording model (a generator for a fixture)."""
    model = RecordingModel().start()
    stack = Stack(redis_url=redis_url, data_dir=data_dir, env_overrides={
        **model.env(), "GAMMA_CONTEXT_WINDOW": "16000", "GAMMA_RESERVE_TOKENS": "2000",
        "GAMMA_KEEP_RECENT_TOKENS": "1500", "GAMMA_IDLE_S": "120", **env,
    })
    stack.start("runtime", "compaction")
    try:
        yield Env(stack, model, Driver(stack.redis_url))
    finally:
        stack.stop()
        model.stop()


def transcript(env: Env, sid: str) -> list[dict[str, Any]]:
    path = session_paths(env.stack.data_dir, sid).transcript
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compactions(env: Env, sid: str) -> list[dict[str, Any]]:
    return [e for e in transcript(env, sid) if e["type"] == "compaction"]


def phase_events(env: Env, sid: str, phase: str) -> list[dict[str, Any]]:
    return [e["data"] for e in env.d.events(sid) if e["type"] == "compaction" and e["data"].get("phase") == phase]


def wait_phase(env: Env, sid: str, phase: str, n: int = 1, timeout: float = 60) -> list[dict[str, Any]]:
    return wait_sync(lambda: found if len(found := phase_events(env, sid, phase)) >= n else None, timeout=timeout,
                     what=f"{sid}: {n} '{phase}' compaction events",
                     detail=lambda: f"have {[e['data'] for e in env.d.events(sid) if e['type'] == 'compaction']}")


def start(env: Env, sid: str, text: str) -> None:
    env.d.prompt(sid, text)
    wake_id = env.d.wake(sid)
    env.d.append(Barrier(session_id=sid, wake_id=wake_id))  # no notifications service in this stack


def runs_ended(env: Env, sid: str) -> int:
    return sum(1 for e in env.d.events(sid) if e["type"] == "agent_end")


def wait_runs(env: Env, sid: str, n: int, timeout: float = 60) -> None:
    wait_sync(lambda: runs_ended(env, sid) >= n, timeout=timeout, what=f"{sid}: {n} runs ended",
              detail=lambda: f"{runs_ended(env, sid)} ended")


def steer(sid: str, kind: str, source_id: str, content: str) -> Injection:
    return Injection(session_id=sid, injection=RuntimeInjection(kind=kind, content=content),
                     source="system", source_id=source_id)


def compact_now(env: Env, sid: str, instructions: str | None = None) -> str:
    command = Compact(session_id=sid, instructions=instructions)
    env.d.append(command)
    answer = env.d.reply(sid, command.request_id, timeout=30)
    assert answer["status"] == 200, answer
    return str(answer["body"]["request_id"])


def write_notes(env: Env, sid: str, count: int, words: int = 900) -> None:
    workspace = session_paths(env.stack.data_dir, sid).workspace / "notes"
    workspace.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        lines = [" ".join(f"tide{i}-{n}-{w}" for w in range(30)) for n in range(words // 30)]
        (workspace / f"part{i:02d}.md").write_text("\n".join(lines))
