"""Messages that arrive as a run ends are not stranded (Pi: after a run, queued steering or follow-ups
continue with another run), while the seed's rule holds: a steer on an idle session starts a turn
only for an active task. In-process runtime, real Redis, scripted model: the hook delivers the inbox
entry exactly after the agent loop stopped and before the run task finished."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.runtime.hosting.session import Session
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.streams.inbox import InboxMessage, Injection, UserPrompt
from shared.redis import keys
from tests.integration.runtime_inproc import InProc, inproc_worker
from tests.integration.runtime_support import call, done, kinds, script, transcript
from tests.support.polling import eventually


async def until(pred: Callable[[], bool], within_s: float = 10.0) -> bool:
    deadline = asyncio.get_running_loop().time() + within_s
    while asyncio.get_running_loop().time() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.02)
    return pred()


def at_run_end(inp: InProc, session: Session, message: InboxMessage, routed: Callable[[], bool]) -> list[bool]:
    """Append `message` when the first run announces `running: false` (the loop has stopped, the
    run task has not finished) and wait there until the session has routed it."""
    original = session.outbox.event
    fired: list[bool] = []

    async def hooked(type_: Any, data: dict[str, Any] | None = None, also: Any = None, **kw: Any) -> None:
        await original(type_, data, also, **kw)
        if type_ == "status" and data and data.get("running") is False and not fired:
            fired.append(await _deliver())

    async def _deliver() -> bool:
        await inp.append(message)
        return await until(routed, 5.0)

    session.outbox.event = hooked  # type: ignore[method-assign]
    return fired


def steer(sid: str, source_id: str) -> Injection:
    return Injection(session_id=sid, injection=RuntimeInjection(kind="system_update", content="import finished"),
                     source="notification", source_id=source_id)


def queued(session: Session, source_id: str) -> Callable[[], bool]:
    return lambda: any(p.source_id == source_id for p in session.queue.pending.values())


async def runs(inp: InProc, sid: str) -> int:
    return len(await inp.events(sid, "agent_end"))


async def settled(inp: InProc, session: Session, n_runs: int) -> None:
    async def idle_after_runs() -> bool:
        return not session.state.running and await runs(inp, session.sid) >= n_runs
    await eventually(idle_after_runs, timeout=10, what=f"{n_runs} runs ended and the session idle")


async def pending(inp: InProc, sid: str) -> int:
    return int((await inp.redis.xpending(keys.inbox(sid), keys.RUNTIME_GROUP))["pending"])


TODO = [{"id": "t1", "content": "Import the slides", "status": "in_progress"}]


async def test_steer_arriving_as_the_run_ends_starts_a_run_for_an_active_task(redis_url: str, data_dir: Path) -> None:
    async with inproc_worker(redis_url, data_dir) as inp:
        sid = "strand1"
        session = await inp.live(sid)
        fired = at_run_end(inp, session, steer(sid, "n-late-1"), queued(session, "n-late-1"))
        await inp.append(UserPrompt(session_id=sid, message=script({"tool_calls": [call("todo", items=TODO)]},
                                                                   done("started"))))
        await settled(inp, session, 2)
        assert fired == [True], "the injection was routed inside the window"
        k = kinds(transcript(data_dir, sid))
        # The prompt was answered in the first run: the second one takes the update in (in plain text).
        assert k[-3:] == ["toolResult", "gamma.system_update", "assistant"], k
        assert await runs(inp, sid) == 2
        reaction = transcript(data_dir, sid)[-1]["message"]["content"]
        assert "system_update" in json.dumps(reaction)
        assert await pending(inp, sid) == 0


async def test_prompt_steered_as_the_run_ends_gets_its_own_run(redis_url: str, data_dir: Path) -> None:
    async with inproc_worker(redis_url, data_dir) as inp:
        sid = "strand2"
        session = await inp.live(sid)
        late = UserPrompt(session_id=sid, message="one more thing", on_busy="steer")
        fired = at_run_end(inp, session, late, session.agent.has_queued)
        await inp.append(UserPrompt(session_id=sid, message=script(done("first"))))
        await settled(inp, session, 2)
        assert fired == [True]
        entries = transcript(data_dir, sid)
        users = [e for e in entries if e["type"] == "message" and e["message"]["role"] == "user"]
        assert [u.get("promptId") for u in users][-1] == late.prompt_id
        assert kinds(entries)[-3:] == ["user", "assistant", "toolResult"]
        assert "one more thing" in json.dumps(await inp.events(sid, "message_user"))
        assert await pending(inp, sid) == 0


async def test_steer_arriving_as_the_run_ends_is_recorded_without_a_run_when_no_task_is_active(
    redis_url: str, data_dir: Path
) -> None:
    async with inproc_worker(redis_url, data_dir) as inp:
        sid = "strand3"
        session = await inp.live(sid)
        fired = at_run_end(inp, session, steer(sid, "n-late-3"), queued(session, "n-late-3"))
        await inp.append(UserPrompt(session_id=sid, message=script(done("first"))))
        await settled(inp, session, 1)
        assert fired == [True]
        # ... nor waits for the next user turn: recorded once the run task has ended (idle.py; a
        # notification has no ref to merge with, so no merge window).
        assert await until(lambda: "gamma.system_update" in kinds(transcript(data_dir, sid)))
        assert await runs(inp, sid) == 1, "no active task: the steer starts no run"
        async def acked() -> bool:
            return await pending(inp, sid) == 0
        await eventually(acked, timeout=10, what="the steer acked once recorded")
        await asyncio.sleep(0.3)  # scenario: nothing else may happen meanwhile (no event marks an absence)
        assert kinds(transcript(data_dir, sid))[-1] == "gamma.system_update"
        await inp.append(UserPrompt(session_id=sid, message="next"))
        await settled(inp, session, 2)
        k = kinds(transcript(data_dir, sid))
        assert k[-4:] == ["gamma.system_update", "user", "assistant", "toolResult"], k
        assert k.count("gamma.system_update") == 1
