"""A yield holds, through the real runtime process and Redis (docs/architecture.md "Delivery, yield
and the idle rules").

A recording model holds the run's last model call (the one that answers with message_user
blockOnUser: true) until the test has queued a steer (`system_update`), a follow-up
(`background_result`) and a next-turn note into the running session; a UI update appended after
them, answered on its reply list, proves the runtime has routed them (one inbox, handled in order).
Then the call is let go: no further model call happens in that run, and the queued entries follow
the idle rules, with and without an active task. Two prompts steered into the run with their views:
one client_view, and both prompts are answered in one new user turn.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from scripted.types import ScriptedReply
from shared.contracts.records.client import PromptClientContext, VisibleTab
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.streams.inbox import Barrier, Injection, UiUpdate, UserPrompt
from shared.redis import keys
from tests.integration.runtime_support import Driver, kinds, transcript
from tests.support.compaction_model import RecordingModel, call, done, reply
from tests.support.polling import wait_sync as eventually
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def model() -> Iterator[RecordingModel]:
    m = RecordingModel().start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def rt(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory, model: RecordingModel) -> Iterator[Stack]:
    stack = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("yield"),
                  env_overrides={**model.env(), "GAMMA_IDLE_S": "120"})
    stack.start("runtime")
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def d(rt: Stack) -> Driver:
    return Driver(rt.redis_url)


class Held:
    """A model step that answers only once released (the test queues entries meanwhile)."""

    def __init__(self, answer: ScriptedReply) -> None:
        self.answer = answer
        self.called = threading.Event()
        self.release = threading.Event()

    def __call__(self, _: dict[str, Any]) -> ScriptedReply:
        self.called.set()
        assert self.release.wait(60), "the test never released the held model call"
        return self.answer


def go_live(d: Driver, sid: str) -> None:
    wake_id = d.wake(sid)
    d.wait_event(sid, lambda e: e["type"] == "status" and e["data"]["status"] == "live", what="live")
    d.append(Barrier(session_id=sid, wake_id=wake_id))


def injection(sid: str, kind: str, source_id: str) -> Injection:
    return Injection(session_id=sid, injection=RuntimeInjection(kind=kind, content=f"<{kind}>{source_id}</{kind}>"),
                     source="notification", source_id=source_id)


def routed(d: Driver, sid: str) -> None:
    """Everything appended before this is handled: a no-op UI update after it is answered."""
    from pycrdt import Doc

    marker = UiUpdate(session_id=sid, update=base64.b64encode(Doc().get_update()).decode())
    d.append(marker)
    assert d.reply(sid, marker.request_id)["status"] == 200


def agent_ends(d: Driver, sid: str) -> list[dict[str, Any]]:
    return [e for e in d.events(sid) if e["type"] == "agent_end"]


def run_ids(d: Driver, sid: str) -> list[str]:
    """The run of each model request, in order."""
    return [e["run_id"] for e in d.events(sid) if e["type"] == "model_request"]


def after_yield(entries: list[dict[str, Any]], nth: int = 0) -> list[str]:
    """What the transcript holds after its `nth` yield (the blocking message_user's result)."""
    yields = [i for i, e in enumerate(entries) if e["type"] == "message" and e["message"]["role"] == "toolResult"
              and (e["message"].get("details") or {}).get("blockOnUser")]
    return kinds(entries[yields[nth] + 1:])


def queue_during_the_yield(d: Driver, model: RecordingModel, sid: str, first: list[Any], then: list[Any],
                           *queued: Any) -> Held:
    """Prompt, let `first` answer, hold the yielding call, queue `queued`, release it; `then` answers
    the calls after it."""
    held = Held(done("Here it is."))
    model.script(*first, held, *then)
    d.prompt(sid, "start")
    assert held.called.wait(60), "the yielding model call never came"
    for m in queued:
        d.append(m)
    routed(d, sid)
    held.release.set()
    eventually(lambda: [e["data"] for e in agent_ends(d, sid)][:1] == [{"stopReason": "yield"}],
               timeout=30, what="the run's yield")
    return held


def test_without_an_active_task_the_steer_is_recorded_without_a_run_the_follow_up_and_the_note_wait(
        rt: Stack, d: Driver, model: RecordingModel) -> None:
    sid = "yield-idle"
    go_live(d, sid)
    queue_during_the_yield(d, model, sid, [], [done("Noted the three.")], injection(sid, "system_update", "u-1"),
                           injection(sid, "background_result", "b-1"), injection(sid, "system_note", "n-1"))
    eventually(lambda: any(e["type"] == "status" and e["data"].get("running") is False for e in d.events(sid)),
               timeout=30, what="the run's end")
    # Not held for the next prompt: the steer is recorded without a run once the run task ended
    # (services/runtime/inbox/idle.py; no ref, so no merge window) and acked; the follow-up and the
    # next-turn-only note still wait for the next turn, unacked (the idle rules).
    eventually(lambda: after_yield(transcript(rt.data_dir, sid)) == ["gamma.system_update"],
               timeout=30, what="the steer recorded without a run")
    eventually(lambda: d.r.xpending(keys.inbox(sid), keys.RUNTIME_GROUP)["pending"] == 2, timeout=30,
               what="the recorded one acked")
    assert len(run_ids(d, sid)) == 1  # no further model call, no new run
    d.prompt(sid, "next")
    eventually(lambda: len(agent_ends(d, sid)) == 2, timeout=30, what="the next prompt's run")
    assert after_yield(transcript(rt.data_dir, sid))[:4] == [
        "gamma.system_update", "gamma.system_note", "gamma.background_result", "user"]
    assert len(run_ids(d, sid)) == 2


def test_with_an_active_task_the_steer_and_the_follow_up_start_a_new_turn_the_note_waits(
        rt: Stack, d: Driver, model: RecordingModel) -> None:
    sid = "yield-task"
    go_live(d, sid)
    plan = reply(call("todo", items=[{"id": "t1", "content": "Build the deck", "status": "in_progress"}]))
    idle_answer = ScriptedReply(content="Noted: the import finished.")
    queue_during_the_yield(d, model, sid, [plan], [idle_answer, done("And the note.")],
                           injection(sid, "system_update", "u-2"), injection(sid, "background_result", "b-2"),
                           injection(sid, "system_note", "n-2"))
    eventually(lambda: len(agent_ends(d, sid)) == 2, timeout=30, what="the idle turn")
    runs = run_ids(d, sid)
    assert len(runs) == 3 and runs[0] == runs[1] != runs[2]  # the yielding run made no third call
    assert [e["data"]["stopReason"] for e in agent_ends(d, sid)] == ["yield", "stop"]
    assert after_yield(transcript(rt.data_dir, sid)) == ["gamma.system_update", "gamma.background_result",
                                                         "assistant"]
    d.prompt(sid, "next")
    eventually(lambda: len(agent_ends(d, sid)) == 3, timeout=30, what="the next prompt's run")
    tail = kinds(transcript(rt.data_dir, sid))
    assert tail[tail.index("gamma.system_note") + 1] == "user"  # the next-turn note waited for the prompt


def test_two_prompts_steered_into_a_yielding_run_bring_one_client_view_and_one_new_turn(
        rt: Stack, d: Driver, model: RecordingModel) -> None:
    sid = "yield-steered"
    go_live(d, sid)

    def steered(text: str, location: str) -> UserPrompt:
        return UserPrompt(session_id=sid, message=text, on_busy="steer", client_context=PromptClientContext(
            locale="en-GB", visible_tabs=[VisibleTab(tab_id="t1", pane_id="p1", ari="gamma:file:deck",
                                                     location=location)]))

    held = Held(done("Here it is."))
    model.script(held, done("Both answered."))
    d.prompt(sid, "start")
    assert held.called.wait(60), "the yielding model call never came"
    d.append(steered("also card 2", "card_2"))
    d.append(steered("and card 3", "card_3"))
    routed(d, sid)
    held.release.set()
    eventually(lambda: len(agent_ends(d, sid)) == 2, timeout=30, what="the steered prompts' turn")
    runs = run_ids(d, sid)
    assert len(runs) == 2 and runs[0] != runs[1]  # the yield ended its run; the prompts got a new one
    assert [e["data"]["stopReason"] for e in agent_ends(d, sid)] == ["yield", "yield"]
    entries = transcript(rt.data_dir, sid)
    # The second prompt's view goes with it; the first prompt's older view was dropped.
    assert after_yield(entries) == ["user", "gamma.client_view", "user", "assistant", "toolResult"]
    views = [e["content"] for e in entries if e["type"] == "custom_message" and e["customType"] == "gamma.client_view"]
    assert len(views) == 1 and "card_3" in views[0] and "card_2" not in views[0]  # the newer view replaced the older
    assert d.r.xpending(keys.inbox(sid), keys.RUNTIME_GROUP)["pending"] == 0  # both acked with the turn
