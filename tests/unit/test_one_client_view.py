"""One client_view (seed: "The latest client_view replaces the older view"), on every path by which a
view enters a queue: a standalone view (an inbox injection), a steered prompt's view, an idle
prompt's view. The real protocol and Agent; the replaced view's inbox entries are acked with the view
that replaced it. tests/integration/test_yield_holds.py checks two steered prompts through the real
runtime."""

from __future__ import annotations

from pathlib import Path

from services.runtime.engine.agent import Agent
from services.runtime.engine.types import AgentContext, AgentEvent, RunHooks
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from services.runtime.turns.delivery_rules import Action, Found
from services.runtime.turns.pending_queue import PendingQueue
from shared.contracts.records.client import PromptClientContext
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.messages import AgentMessage, AssistantMessage, CustomMessage
from shared.contracts.streams.inbox import Injection, UserPrompt
from tests.unit.runtime_fakes import build


async def no_guard() -> None:
    return None


async def never(*_: object) -> AssistantMessage:
    raise AssertionError("no model call expected")


async def sink(_: AgentEvent) -> None:
    return None


def controller(tmp_path: Path) -> PendingQueue:
    agent = Agent(AgentContext("sys", [], []), RunHooks(stream=never), sink)
    return PendingQueue(agent, Transcript.load(tmp_path / "t.jsonl", WriteGuard(no_guard)), lambda: False)


def standalone(c: PendingQueue, name: str, entry_id: str) -> Action | Found:
    return c.route_update(Injection(session_id="s", source="client", source_id=name,
                                    injection=RuntimeInjection(kind="client_view", content=f"<client_view>{name}</client_view>")),
                          entry_id)


def prompt(text: str, locale: str) -> UserPrompt:
    return UserPrompt(session_id="s", message=text, client_context=PromptClientContext(locale=locale))


def steer(c: PendingQueue, p: UserPrompt, entry_id: str) -> None:
    for m in build(c, p, entry_id, busy=True).messages:
        c.agent.steer(m)


def views(messages: list[AgentMessage]) -> list[str]:
    return [m.content for m in messages if isinstance(m, CustomMessage) and m.custom_type == "gamma.client_view"]


def queued_views(c: PendingQueue) -> list[str]:
    return views([*c.next_turn, *c.agent.queued()])


def acked_with(c: PendingQueue, content_part: str) -> list[str]:
    [p] = [p for p in c.pending.values() if p.message.custom_type == "gamma.client_view" and content_part in p.message.content]
    return p.entry_ids


async def test_a_standalone_view_replaces_a_queued_standalone_view(tmp_path: Path) -> None:
    c = controller(tmp_path)
    assert standalone(c, "v1", "e1") is Action.NEXT_TURN
    assert standalone(c, "v2", "e2") is Found.MERGED
    assert queued_views(c) == ["<client_view>v2</client_view>"] and acked_with(c, "v2") == ["e1", "e2"]


async def test_a_standalone_view_replaces_a_steered_prompts_view_in_place(tmp_path: Path) -> None:
    c = controller(tmp_path)
    steer(c, prompt("look", "it-IT"), "e1")
    assert standalone(c, "v2", "e2") is Found.MERGED
    assert [getattr(m, "content", None) for m in c.agent.queued()] == ["<client_view>v2</client_view>", "look"]
    assert c.next_turn == [] and acked_with(c, "v2") == ["e2"]  # the prompt's view had no entry of its own


async def test_a_steered_prompts_view_replaces_a_queued_standalone_view(tmp_path: Path) -> None:
    c = controller(tmp_path)
    standalone(c, "v1", "e1")
    steer(c, prompt("look", "it-IT"), "e2")
    assert len(queued_views(c)) == 1 and "it-IT" in queued_views(c)[0] and acked_with(c, "it-IT") == ["e1"]


async def test_two_steered_prompts_with_views_leave_one_view(tmp_path: Path) -> None:
    c = controller(tmp_path)
    standalone(c, "v0", "e0")
    steer(c, prompt("first", "it-IT"), "e1")
    steer(c, prompt("second", "de-DE"), "e2")
    assert len(queued_views(c)) == 1 and "de-DE" in queued_views(c)[0]
    assert acked_with(c, "de-DE") == ["e0"]  # the standalone's entry, carried through both replacements
    assert [m.content for m in c.agent.queued() if not isinstance(m, CustomMessage)] == ["first", "second"]
    assert sum(1 for p in c.pending.values() if p.message.custom_type == "gamma.client_view") == 1


async def test_an_idle_prompts_view_replaces_every_held_view(tmp_path: Path) -> None:
    """Held views: a standalone one, and one a yield or an abort left from a steered prompt."""
    c = controller(tmp_path)
    steer(c, prompt("steered", "it-IT"), "e1")
    assert c.hold_queued()  # a yield's hand-over: the queues join the next-turn list (a prompt among them)
    standalone(c, "v2", "e2")  # replaces the held prompt's view in place
    turn = build(c, prompt("now", "fr-FR"), entry_id="e3")
    assert len(views(turn.messages)) == 1 and "fr-FR" in views(turn.messages)[0]
    assert [getattr(m, "content", None) for m in turn.messages][-2:] == [views(turn.messages)[0], "now"]
    assert acked_with(c, "fr-FR") == ["e2"] and c.next_turn == []


async def test_a_turn_without_a_prompt_view_takes_only_the_latest(tmp_path: Path) -> None:
    c = controller(tmp_path)
    standalone(c, "v1", "e1")
    standalone(c, "v2", "e2")
    turn = build(c, UserPrompt(session_id="s", message="hi"))
    assert views(turn.messages) == ["<client_view>v2</client_view>"]
