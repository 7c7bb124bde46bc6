"""The turn builder over the pending queue (services/runtime/turns/turn_order.py, pending_queue.py; docs/
architecture.md "The runtime's parts"): a prompt's turn is put in order from what it took from the
queue in one take, its prompt-time hints an input placed before the user message, never patched into
the built turn; a hint the queue already holds under the same source is not told twice."""

from __future__ import annotations

from pathlib import Path

from services.runtime.turns.pending_queue import source_key
from shared.contracts.records.client import PromptClientContext
from shared.contracts.records.messages import AgentMessage, CustomMessage, UserMessage
from shared.contracts.streams.inbox import AttachedFile, UserPrompt
from tests.unit.runtime_fakes import build
from tests.unit.test_runtime_protocol import controller, inj


def hint(source_id: str) -> CustomMessage:
    return CustomMessage(custom_type="gamma.workspace_update", content="<workspace_update>n</workspace_update>",
                         display=False, details={"trusted": True, "injectionType": "workspace_update",
                                                 "source": "system", "sourceId": source_id})


def kinds(messages: list[AgentMessage]) -> list[str]:
    return [m.custom_type if isinstance(m, CustomMessage) else "user" for m in messages]


def prompt(text: str) -> UserPrompt:
    return UserPrompt(session_id="s", message=text, client_context=PromptClientContext(locale="en"),
                      files=[AttachedFile(path="a.txt", media_type="text/plain", bytes=1)])


async def test_an_idle_turn_in_order_with_its_hints_before_the_user_message(tmp_path: Path) -> None:
    q = controller(tmp_path)
    q.route_update(inj("system_note", "n1", source="system"), "e1")
    p = prompt("go")
    turn = build(q, p, "p1", hints=(hint("k1"),))
    assert kinds(turn.messages) == ["gamma.system_note", "gamma.client_view", "gamma.attachments",
                                    "gamma.workspace_update", "user"]
    assert [t.entry_id for t in turn.prompts] == ["p1"] and isinstance(turn.prompts[0].message, UserMessage)
    assert [i.source_id for i in turn.injections] == ["n1", f"{p.prompt_id}#client_view"] and q.next_turn == []


async def test_a_busy_turn_takes_only_its_own_view(tmp_path: Path) -> None:
    q = controller(tmp_path)
    q.route_update(inj("system_note", "n1", source="system"), "e1")
    turn = build(q, prompt("also"), "p2", busy=True, hints=(hint("k1"),))
    assert kinds(turn.messages) == ["gamma.client_view", "gamma.attachments", "gamma.workspace_update", "user"]
    assert kinds(q.next_turn) == ["gamma.system_note"]  # it waits for the next user turn


async def test_a_hint_already_queued_is_not_told_twice(tmp_path: Path) -> None:
    q = controller(tmp_path)
    q.route_update(inj("workspace_update", "k1", source="system"), "e1")  # the proxy's announcement
    turn = build(q, UserPrompt(session_id="s", message="go"), "p1", hints=(hint("k1"), hint("k2")))
    assert [source_key(m) for m in turn.messages if isinstance(m, CustomMessage)] == [("system", "k1"),
                                                                                        ("system", "k2")]
    assert [p.entry_ids for p in turn.injections] == [["e1"]]  # the queued one, acked when recorded
