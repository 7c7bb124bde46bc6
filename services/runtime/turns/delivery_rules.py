"""Delivery as one pure decision (docs/architecture.md "Delivery, yield and the idle rules"): where a runtime
injection or a user prompt goes, by its kind and the session's moment, read in one table. Every path
that delivers asks `decide`: the routing of an injection as it arrives (pending_queue.py `route_update`,
through delivery.py `InjectionDelivery.deliver` and the dormant manifest), a prompt as it arrives
(dispatcher.py `on_prompt`), a turn that meets a run started meanwhile and the prompts a failed run
took (supervisor.py `start_run`, `recover`, through pending_queue.py `join_run`, `rejoin_untaken`), a
skill rule's guidance during a run (skill_rules.py, through pending_queue.py `inject`), what an idle
session's held updates start (pending_queue.py `take_idle`, asked by supervisor.py `left_to_run` as a
run ends, by delivery.py and by the dispatcher at the wake barrier) and what idle recording records
(idle.py `IdleRecorder.arm` through pending_queue.py `recordable`). Of its answers, STEER and
FOLLOW_UP enter the running Agent in one place, `into_run`; no other module calls its queues.

The seed's `deliveryByKind` first: each injection kind has one delivery. `steer` enters the running
agent before its next model call; `follow_up` when the run would stop; `next_turn` waits for the next
user turn. Then the idle rules, per moment of the session:

| delivery | running | idle, a task active | idle, no active task | held (before the wake barrier) |
|---|---|---|---|---|
| steer | STEER | START_TURN | RECORD_IDLE | HOLD |
| follow_up | FOLLOW_UP | START_TURN | NEXT_TURN | HOLD |
| next_turn | NEXT_TURN | NEXT_TURN | NEXT_TURN | NEXT_TURN |

A user prompt's kind is its `on_busy` (`Prompt`, shared/contracts/streams/inbox.py `OnBusy`): it starts a turn
on an idle session whatever it says, waits for the barrier before it, and during a run:

| prompt on_busy | running | idle (either) | held (before the wake barrier) |
|---|---|---|---|
| steer | STEER | START_TURN | HOLD |
| follow_up | FOLLOW_UP | START_TURN | HOLD |
| reject | REJECT | START_TURN | HOLD |
| interrupt | INTERRUPT | START_TURN | HOLD |

A prompt already taken in (`Prompt(accepted=True)`: its turn was built for an idle session and a run
started meanwhile, or a run that failed had taken it) can no longer be refused nor abort anything:
during a run it follows up when it asked to, and steers otherwise; at the other moments as above.

| accepted prompt on_busy | running |
|---|---|
| steer, reject, interrupt | STEER |
| follow_up | FOLLOW_UP |

The loop's own reply rules (engine/reply_rules.py: the nudge after an empty reply, the one after a
reply cut at the output limit) are a `system_guidance` the loop itself puts before the next model
call, ahead of what was steered meanwhile (the nudge is about the reply just read): where this table
puts that kind during a run, from the engine, which is below this module and does not ask it.

"A task active": a todo task is pending or in progress and the user has not stopped the agent since.
RECORD_IDLE waits in the next-turn list for its merge window and is then recorded without a turn
(idle.py); a turn that starts first takes it. HOLD waits until the barrier passes (an injection in the
next-turn list, a prompt in the session's held prompts), when these rules are asked again of what is
held. REJECT answers the client `busy`; INTERRUPT aborts the run (abort.py) and then starts its turn.
A yield ends a run with its queues held: their injections follow these rules as idle ones
(supervisor.py `left_to_run`)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from shared.contracts.records.injection import InjectionKind
from shared.contracts.records.messages import AgentMessage
from shared.contracts.streams.inbox import OnBusy

Delivery = Literal["steer", "follow_up", "next_turn"]

# The seed's deliveryByKind.
DELIVERY_BY_KIND: dict[str, Delivery] = {
    "system_note": "next_turn",
    "system_guidance": "steer",
    "system_update": "steer",
    "client_view": "next_turn",
    "artifact_update": "steer",
    "workspace_update": "steer",
    "background_result": "follow_up",
}


class When(enum.Enum):
    """The session's moment, as delivery sees it."""
    RUNNING = "running"
    IDLE_TASK_ACTIVE = "idle, a task active"
    IDLE = "idle, no active task"
    HELD = "held"


class Action(enum.Enum):
    """Where an injection or a prompt goes: the closed set of deliveries."""
    STEER = "steer"              # the running Agent's steer queue: before its next model call
    FOLLOW_UP = "follow_up"      # the running Agent's follow-up queue: when the run would stop
    START_TURN = "start_turn"    # a turn starts now to take it (an injection: from the next-turn list)
    RECORD_IDLE = "record_idle"  # the next-turn list, recorded after its merge window (idle.py)
    NEXT_TURN = "next_turn"      # the next-turn list, until the next user turn
    HOLD = "hold"                # held until the wake barrier passes
    REJECT = "reject"            # a prompt refused: the client is told the session is busy
    INTERRUPT = "interrupt"      # a prompt that aborts the run, then starts its own turn


@dataclass(frozen=True)
class Prompt:
    """A user prompt's kind, for `decide`: its `on_busy`, and whether it is already taken in (`accepted`)."""
    on_busy: OnBusy
    accepted: bool = False


RULES: dict[tuple[Delivery, When], Action] = {
    ("steer", When.RUNNING): Action.STEER,
    ("steer", When.IDLE_TASK_ACTIVE): Action.START_TURN,
    ("steer", When.IDLE): Action.RECORD_IDLE,
    ("steer", When.HELD): Action.HOLD,
    ("follow_up", When.RUNNING): Action.FOLLOW_UP,
    ("follow_up", When.IDLE_TASK_ACTIVE): Action.START_TURN,
    ("follow_up", When.IDLE): Action.NEXT_TURN,
    ("follow_up", When.HELD): Action.HOLD,
    ("next_turn", When.RUNNING): Action.NEXT_TURN,
    ("next_turn", When.IDLE_TASK_ACTIVE): Action.NEXT_TURN,
    ("next_turn", When.IDLE): Action.NEXT_TURN,
    ("next_turn", When.HELD): Action.NEXT_TURN,
}


PROMPT_RULES: dict[tuple[OnBusy, When], Action] = {
    ("steer", When.RUNNING): Action.STEER,
    ("follow_up", When.RUNNING): Action.FOLLOW_UP,
    ("reject", When.RUNNING): Action.REJECT,
    ("interrupt", When.RUNNING): Action.INTERRUPT,
    **{(on_busy, when): Action.START_TURN for on_busy in ("steer", "follow_up", "reject", "interrupt")
       for when in (When.IDLE_TASK_ACTIVE, When.IDLE)},
    **{(on_busy, When.HELD): Action.HOLD for on_busy in ("steer", "follow_up", "reject", "interrupt")},
}


ACCEPTED_RULES: dict[tuple[OnBusy, When], Action] = {
    **PROMPT_RULES,
    ("reject", When.RUNNING): Action.STEER,
    ("interrupt", When.RUNNING): Action.STEER,
}


def decide(kind: InjectionKind | Prompt | str, when: When) -> Action:
    """Where an injection of `kind`, or a prompt, goes at moment `when`."""
    if isinstance(kind, Prompt):
        return (ACCEPTED_RULES if kind.accepted else PROMPT_RULES)[(kind.on_busy, when)]
    return RULES[(DELIVERY_BY_KIND[kind], when)]


class RunQueues(Protocol):
    """The running Agent's two queues (engine/agent.py)."""

    def steer(self, message: AgentMessage) -> None: ...

    def follow_up(self, message: AgentMessage) -> None: ...


def into_run(agent: RunQueues, action: Action, messages: Iterable[AgentMessage]) -> bool:
    """The one place a delivery enters the running Agent, as `decide` answered: STEER into its steer
    queue (before its next model call), FOLLOW_UP into its follow-up queue (when the run would stop).
    Any other action enters nothing: False, and the caller acts on it."""
    if action is Action.STEER:
        into = agent.steer
    elif action is Action.FOLLOW_UP:
        into = agent.follow_up
    else:
        return False
    for m in messages:
        into(m)
    return True


def moment(*, held: bool, running: bool, active_task: Callable[[], bool]) -> When:
    """The session's moment: held before the wake barrier, else running, else idle with or without an
    active task (asked only when idle)."""
    if held:
        return When.HELD
    if running:
        return When.RUNNING
    return When.IDLE_TASK_ACTIVE if active_task() else When.IDLE


def idle(active_task: bool) -> When:
    return When.IDLE_TASK_ACTIVE if active_task else When.IDLE


class Found(enum.Enum):
    """What routing finds before it decides: the injection needs no delivery of its own."""
    RECORDED = "recorded"  # already in the transcript (a redelivery): answered for again
    COVERED = "covered"    # an artifact_update whose revisions the agent was already told
    MERGED = "merged"      # the same source id already queued, or a queued one of the same target replaced
