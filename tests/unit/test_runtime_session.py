"""The session as a composition root, built in process (fake outbox and lease, no Redis, no model
call): the compactor's hooks are in the run hooks it gives the Agent, and its parts share its state."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripted.gamma import ScriptedGamma
from scripted.transport import scripted_client
from services.runtime.hosting.links import Links, Unbound
from services.runtime.hosting.session import Session
from services.runtime.hosting.session_deps import SessionDeps
from services.runtime.hosting.session_files import SessionFiles
from services.runtime.model.openai_stream import ModelSettings
from shared.history.tokens import TokenCounter
from shared.settings import Settings
from shared.storage.disk import session_paths
from tests.unit.runtime_fakes import FakeLease, FakeOutbox


async def ack(_sid: str, _entry_id: str) -> None:
    return None


def build(tmp_path: Path) -> Session:
    settings = Settings(data_dir=tmp_path, context_window=50_000)
    deps = SessionDeps(settings=settings, client=None, model_client=scripted_client(ScriptedGamma()), skills={},
                       system_prompt="sys", counter=TokenCounter(), ack=ack)
    paths = session_paths(tmp_path, "s1")
    paths.workspace.mkdir(parents=True, exist_ok=True)
    return Session(deps, paths, SessionFiles.read(paths), FakeLease("s1"), FakeOutbox(), ModelSettings(model="m1"), "w1",  # type: ignore[arg-type]
                   context_window=8_000)


async def test_the_run_hooks_are_built_with_the_compactor_hooks(tmp_path: Path) -> None:
    session = build(tmp_path)
    config = session.agent.hooks
    assert config.before_model_call == session.compactor.before_model_call
    assert config.stream is not session.stream  # wrapped once, when the config was built
    assert session.compactor.context_window == 8_000 and session.compactor.model == "m1"
    # The skill rules wrap the toolset's preflight (services/runtime/turns/skill_rules.py).
    assert config.prepare_batch == session.rules.prepare_batch and session.rules.inner == session.toolset.prepare_batch


async def test_the_parts_share_the_sessions_state(tmp_path: Path) -> None:
    session = build(tmp_path)
    await session.restore()
    assert session.recorder.queue is session.queue and session.dispatcher.turns is session.turns and session.recorder.transcript is session.transcript
    assert session.tools.todo is session.todo and session.tools.transcript is session.transcript
    assert session.writes.files is session.tools  # a client's file write updates the tool host's list
    assert session.runs.state is session.state and session.dispatcher.state is session.state
    # Each part of the state is written by its one owner (state.py): the run's, the inbox's.
    assert session.runs.run is session.run and session.dispatcher.inbox is session.inbox
    assert session.compactor.context is session.agent.context
    assert not session.state.running and session.state.run_task is None
    assert session.state.idle_for() >= 0.0


async def test_the_forward_links_are_bound_once_every_part_is_built(tmp_path: Path) -> None:
    session = build(tmp_path)
    assert session.rules.inject == session.links.inject and session.compactor.reload == session.links.restore_context
    with pytest.raises(RuntimeError):  # bound once, by the root
        session.links.bind(queue=session.queue, turns=session.turns, runs=session.runs,
                           injections=session.injections, recorder=session.recorder)
    with pytest.raises(Unbound):
        Links().restore_context()  # a call before the root bound the parts: a construction-order bug


async def test_a_wake_restores_from_the_files_it_read(tmp_path: Path) -> None:
    """The workspace's file list comes from the wake's one read (session_files.py), not a walk of its own."""
    session = build(tmp_path)
    (session.paths.workspace / "a.txt").write_text("a")
    files = SessionFiles.read(session.paths)
    (session.paths.workspace / "b.txt").write_text("b")  # after the read: a walk of its own would list it
    await session.restore(files)
    assert session.tools.viewable_files == ["a.txt"]
