"""The recorder in process (fake outbox, real transcript and protocol): the transcript line first,
then the owner hears (InjectionRecorded), then the inbox entries are acked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.runtime.engine.types import AgentEvent
from services.runtime.live.pending import TurnInput
from services.runtime.runs.recorder import Recorder
from services.runtime.skillset.skill_lifecycle import SkillContracts
from services.runtime.turns.delivery_rules import Action, Found
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.messages import AssistantMessage
from shared.contracts.records.transcript import MessageEntry
from shared.contracts.streams.inbox import Injection, UserPrompt
from shared.contracts.streams.recorded import InjectionRecorded
from shared.redis import keys
from tests.unit.runtime_fakes import Host, answer


def recorder(host: Host, order: list[tuple[str, Any]]) -> Recorder:
    async def ack(entry_id: str | None) -> None:
        if entry_id:
            # What the ack follows must be durable already: the line is on disk when the ack goes.
            order.append(("ack", entry_id, len(host.transcript.path.read_text().splitlines())))

    contracts = SkillContracts(host.transcript, {}, host.outbox)  # type: ignore[arg-type]
    return Recorder(host.sid, host.transcript, host.queue, host.outbox, ack, contracts, None,  # type: ignore[arg-type]
                    None, lambda: "m", lambda: host.agent.messages)


async def test_a_prompt_is_recorded_with_its_prompt_id_then_acked(tmp_path: Path) -> None:
    host = Host(tmp_path)
    order: list[tuple[str, Any]] = []
    await host.transcript.ensure_header()
    prompt = UserPrompt(session_id="s1", message="hello")
    turn = host.turns.build(TurnInput(prompt=prompt, entry_id="1-0"))
    assert [p.entry_id for p in turn.prompts] == ["1-0"] and turn.injections == []
    await recorder(host, order).emit(AgentEvent(type="message_end", message=turn.messages[-1]))
    lines_after = len(host.transcript.path.read_text().splitlines())
    assert order == [("ack", "1-0", lines_after)]
    assert prompt.prompt_id in host.transcript.prompts
    assert host.queue.prompts == []  # no longer pending
    assert host.outbox.sent[-1][:2] == ("event", "message_end")


async def test_an_injection_is_recorded_then_its_owner_hears_then_its_entries_are_acked(tmp_path: Path) -> None:
    host = Host(tmp_path)
    order: list[tuple[str, Any]] = []
    await host.transcript.ensure_header()
    inj = Injection(session_id="s1", injection=RuntimeInjection(kind="system_update", content="x"),
                    source="notification", source_id="n1")
    assert host.queue.route_update(inj, "1-0") is Action.RECORD_IDLE
    assert host.queue.route_update(inj, "2-0") is Found.MERGED  # a redelivery while queued: acked with it
    turn = host.queue.take_next_turn()
    assert [p.entry_ids for p in turn.injections] == [["1-0", "2-0"]]
    rec = recorder(host, order)
    await rec.emit(AgentEvent(type="message_end", message=turn.messages[0]))
    published = [s for s in host.outbox.sent if s[0] == "publish"]
    assert len(published) == 1 and published[0][1] == keys.INJECTIONS_RECORDED
    recorded = published[0][2]
    assert isinstance(recorded, InjectionRecorded) and recorded.source_id == "n1"
    assert recorded.entry_id == host.transcript.sources[("notification", "n1")]
    lines = len(host.transcript.path.read_text().splitlines())
    assert order == [("ack", "1-0", lines), ("ack", "2-0", lines)]
    assert host.queue.pending == {}
    # Recorded once: a later message with the same source is not pending any more.
    assert host.queue.route_update(inj, "3-0") is Found.RECORDED


async def test_progress_events_do_not_wait_and_other_messages_are_just_recorded(tmp_path: Path) -> None:
    host = Host(tmp_path)
    await host.transcript.ensure_header()
    rec = recorder(host, [])
    await rec.emit(AgentEvent(type="message_update", data={"delta": "o"}))
    message = answer("done")
    await rec.emit(AgentEvent(type="message_end", message=message))
    assert [(s[1], s[3]) for s in host.outbox.sent if s[0] == "event"][:2] == [("message_update", False),
                                                                               ("message_end", True)]
    last = host.transcript.entries[-1]
    assert isinstance(last, MessageEntry) and isinstance(last.message, AssistantMessage) and last.message.text() == "done"
