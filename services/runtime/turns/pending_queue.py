"""The pending queue (docs/architecture.md "Delivery, yield and the idle rules"): the one owner and
writer of what waits to be recorded. Pending injections live in the Agent's steer / follow-up queues or
in the next-turn list (Pi's `_pendingNextTurnMessages`), each remembered by its source and source id
(which its message carries) with the inbox entries to ack once its transcript entry is durable; prompts
not yet recorded wait in arrival order. An injection goes where delivery_rules.py `decide` says (into
the running Agent through its `into_run`); a prompt comes here through turn_order.py only; what leaves
the queue leaves as taken messages, which turn_order.py puts in a turn's order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from services.runtime.engine.agent import Agent
from services.runtime.live.pending import PendingInjection, PendingPrompt, PendingTurn, Taken
from services.runtime.store.transcript import Transcript
from services.runtime.turns.attachments import client_view_content
from services.runtime.turns.delivery_rules import Action, Found, Prompt, When, decide, idle, into_run, moment
from shared.contracts.records.injection import InjectionKind, RuntimeInjection
from shared.contracts.records.messages import AgentMessage, CustomMessage, UserMessage
from shared.contracts.streams.inbox import Injection, UserPrompt
from shared.trust.trusted_blocks import artifact_update, ensure_block

Key = tuple[str, str]


def source_key(message: AgentMessage) -> Key | None:
    """The (source, source id) an injection's message carries: the key of its PendingInjection."""
    details = getattr(message, "details", None)
    if not isinstance(message, CustomMessage) or not isinstance(details, dict) or "sourceId" not in details:
        return None
    return str(details.get("source")), str(details["sourceId"])


def injection_message(inj: Injection, from_revision: int | None = None) -> CustomMessage:
    kind = inj.injection.kind
    content = ensure_block(kind, inj.injection.content)
    details: dict[str, object] = {"trusted": True, "injectionType": kind, "source": inj.source,
                                  "sourceId": inj.source_id}
    if inj.ref:
        details["ref"] = inj.ref
    if from_revision is not None or inj.from_revision is not None:
        details["fromRevision"] = from_revision if from_revision is not None else inj.from_revision
    if inj.to_revision is not None:
        details["toRevision"] = inj.to_revision
    return CustomMessage(custom_type=f"gamma.{kind}", content=content, display=False, details=details)


def restated(inj: Injection, told: int) -> Injection:
    """An artifact_update composed from a revision older than the one the agent was told since:
    its text would repeat changes already reported, and the part after `told` cannot be cut out of
    it, so it becomes a marker from `told` (the builder's correction replaces it if still queued)."""
    body = (f"{inj.ref} changed after revision {told}, which you were already told about; it is now at "
            f"revision {inj.to_revision}. Read it for the details.")
    content = artifact_update(inj.ref or "", told, inj.to_revision or told, body)
    return inj.model_copy(update={"from_revision": told,
                                  "injection": RuntimeInjection(kind="artifact_update", content=content)})


def is_client_view(m: AgentMessage) -> bool:
    return isinstance(m, CustomMessage) and m.custom_type == "gamma.client_view"


class PendingQueue:
    def __init__(self, agent: Agent, transcript: Transcript, has_active_task: Callable[[], bool]) -> None:
        self.agent = agent
        self.transcript = transcript
        self.has_active_task = has_active_task
        self.next_turn: list[AgentMessage] = []  # next-turn and idle-held injections (abort.py: kept prompts)
        # (source, source id) -> the queued or in-flight injection with its inbox entries
        self.pending: dict[Key, PendingInjection] = {}
        self.prompts: list[PendingPrompt] = []  # prompts not yet recorded, arrival order

    # ------------------------------------------------------------ look-ups

    def pending_of(self, message: AgentMessage) -> PendingInjection | None:
        key = source_key(message)
        p = self.pending.get(key) if key is not None else None
        return p if p is not None and p.message is message else None

    def prompt_of(self, message: AgentMessage) -> PendingPrompt | None:
        return next((p for p in self.prompts if p.message is message), None)

    def pending_prompt(self, prompt_id: str) -> PendingPrompt | None:
        return next((p for p in self.prompts if p.prompt_id == prompt_id), None)

    def _turn(self, messages: Sequence[AgentMessage]) -> PendingTurn:
        injections = [p for p in map(self.pending_of, messages) if p is not None]
        prompts = [p for p in map(self.prompt_of, messages) if p is not None]
        return PendingTurn(list(messages), prompts, injections)

    def _queued(self) -> set[int]:
        return {id(m) for m in (*self.next_turn, *self.agent.queued())}

    # ------------------------------------------------------------ recorded (recorder.py)

    def take_injection(self, message: AgentMessage) -> PendingInjection | None:
        """The recorder's look-up when `message` is recorded: its injection, no longer pending."""
        p = self.pending_of(message)
        if p is not None:
            del self.pending[(p.source, p.source_id)]
        return p

    def take_prompt(self, message: AgentMessage) -> PendingPrompt | None:
        p = self.prompt_of(message)
        if p is not None:
            self.prompts.remove(p)
        return p

    def artifact_recorded(self, ref: str, told: int) -> list[PendingInjection]:
        """An artifact_update for `ref` up to revision `told` was just recorded. A queued one for the
        same ref that the digest builder composed before that (from an older revision) would repeat
        part of it: it is restated from `told`, or dropped when `told` covers it all. Returns the
        dropped ones, for the caller to ack as recorded."""
        queued = self._queued()
        dropped: list[PendingInjection] = []
        for p in list(self.pending.values()):
            if p.ref != ref or id(p.message) not in queued or p.message.details.get("injectionType") != "artifact_update":
                continue
            from_revision = p.message.details.get("fromRevision")
            if p.to_revision is not None and p.to_revision <= told:
                del self.pending[(p.source, p.source_id)]
                if not self.agent.remove_queued(p.message):
                    self.next_turn = [m for m in self.next_turn if m is not p.message]
                dropped.append(p)
            elif isinstance(from_revision, int) and from_revision < told and p.to_revision is not None:
                inj = Injection(session_id="", source=p.source, source_id=p.source_id,  # type: ignore[arg-type]
                                injection=RuntimeInjection(kind="artifact_update", content=p.message.content),
                                ref=ref, from_revision=from_revision, to_revision=p.to_revision)
                message = injection_message(restated(inj, told))
                self.pending[(p.source, p.source_id)] = PendingInjection(
                    message=message, source=p.source, source_id=p.source_id, kind=p.kind,
                    entry_ids=p.entry_ids, ref=ref, to_revision=p.to_revision)
                self._replace(p.message, message)
        return dropped

    def _replace(self, old: AgentMessage, new: AgentMessage) -> None:
        if not self.agent.replace_queued(old, new):
            self.next_turn = [new if m is old else m for m in self.next_turn]

    # ------------------------------------------------------------ arriving

    def route_update(self, inj: Injection, entry_id: str | None, *, hold: bool = False) -> Action | Found:
        """Queue one injection where `decide` says (delivery_rules.py), and return that action; or what
        was found first (`Found`). START_TURN: the caller starts a run with `take_idle()`."""
        if (inj.source, inj.source_id) in self.transcript.sources:
            return Found.RECORDED
        same = self.pending.get((inj.source, inj.source_id))
        if same is not None:
            same.entry_ids.extend([entry_id] if entry_id else [])
            return Found.MERGED
        if inj.injection.kind == "artifact_update" and inj.ref:
            told = self.transcript.told.get(inj.ref, (None, ""))[0]
            if told is not None and inj.to_revision is not None and inj.to_revision <= told:
                return Found.COVERED
            if told is not None and inj.from_revision is not None and inj.from_revision < told:
                inj = restated(inj, told)
        kind = inj.injection.kind
        old = self._queued_same_target(inj)
        from_revision = None
        entry_ids = [entry_id] if entry_id else []  # a wake-time injection (manifest, form) has no entry
        if old is not None:
            # The latest client_view replaces the older one; one artifact_update per ref, keeping the
            # older from_revision. The replaced entry is acked with the replacement.
            prev_from = old.message.details.get("fromRevision")
            from_revision = prev_from if isinstance(prev_from, int) else None
            entry_ids = old.entry_ids + entry_ids
        message = injection_message(inj, from_revision)
        pending = PendingInjection(message=message, source=inj.source, source_id=inj.source_id, kind=kind,
                                   entry_ids=entry_ids, ref=inj.ref, to_revision=inj.to_revision)
        if old is not None:
            del self.pending[(old.source, old.source_id)]
            self.pending[(pending.source, pending.source_id)] = pending
            self._replace(old.message, message)
            return Found.MERGED
        self.pending[(pending.source, pending.source_id)] = pending
        action = decide(kind, moment(held=hold, running=self.agent.is_running, active_task=self.has_active_task))
        if not into_run(self.agent, action, [message]):
            self.next_turn.append(message)
        return action

    def inject(self, kind: InjectionKind, messages: Sequence[AgentMessage]) -> Action:
        """Messages the harness adds itself, as one delivery of `kind` (a skill rule's guidance with the
        skills it loads, skill_rules.py: asked during a run): where `decide` says at the session's moment,
        the next-turn list unless into the run. Not pending: no inbox entry waits for them."""
        action = decide(kind, moment(held=False, running=self.agent.is_running, active_task=self.has_active_task))
        if not into_run(self.agent, action, messages):
            self.next_turn.extend(messages)
        return action

    def _queued_same_target(self, inj: Injection) -> PendingInjection | None:
        """A still-queued injection the new one replaces (not one already handed to the model)."""
        kind = inj.injection.kind
        queued = self._queued()
        for p in self.pending.values():
            if id(p.message) not in queued:
                continue
            if p.message.details.get("injectionType") != kind:
                continue
            if kind == "client_view" or (kind == "artifact_update" and inj.ref and p.ref == inj.ref):
                return p
        return None

    def take_for_prompt(self, prompt: UserPrompt, entry_id: str | None, user: UserMessage,
                        hints: Sequence[AgentMessage], *, busy: bool) -> Taken:
        """A prompt joins the queue (until its user message is recorded) and takes what its turn
        carries before it: on an idle session the whole next-turn list, its views folded into the
        latest (the prompt's own when it sends one); during a run only its own view, the queued ones
        staying where they wait. A hint whose source is queued or pending already is not told twice
        (knowledge.py: the proxy's own announcement of a note's change)."""
        held = {source_key(m) for m in self.next_turn} | set(self.pending)
        told = [h for h in hints if source_key(h) is None or source_key(h) not in held]
        view = self._prompt_client_view(prompt) if prompt.client_context is not None else None
        own = PendingPrompt(prompt.prompt_id, entry_id, user, on_busy=prompt.on_busy)
        self.prompts.append(own)
        queued: list[AgentMessage]
        if busy:
            queued = [view] if view is not None else []
        else:
            queued, self.next_turn = self.next_turn, []
            views = [m for m in queued if is_client_view(m)]
            queued = [*queued, view] if view is not None else [m for m in queued if not is_client_view(m)] + views[-1:]
        injections = [p for p in map(self.pending_of, queued) if p is not None]
        kept = [p for p in map(self.prompt_of, queued) if p is not None]
        return Taken(queued, told, [*kept, own], injections)

    def _prompt_client_view(self, prompt: UserPrompt) -> CustomMessage:
        """The prompt's view. The latest client_view replaces the older ones still queued (the
        next-turn list, or a steered prompt's in the Agent's queues); they are acked with it."""
        assert prompt.client_context is not None
        queued = [m for m in (*self.next_turn, *self.agent.queued()) if is_client_view(m)]
        old = [p for p in map(self.pending_of, queued) if p is not None]
        self.next_turn = [m for m in self.next_turn if not is_client_view(m)]
        for m in queued:
            self.agent.remove_queued(m)
        source_id = f"{prompt.prompt_id}#client_view"
        message = CustomMessage(custom_type="gamma.client_view", content=client_view_content(prompt.client_context),
                                details={"trusted": True, "injectionType": "client_view", "source": "client",
                                         "sourceId": source_id})
        entry_ids = [e for p in old for e in p.entry_ids]
        for p in old:
            del self.pending[(p.source, p.source_id)]
        self.pending[("client", source_id)] = PendingInjection(message=message, source="client", source_id=source_id,
                                                               kind="client_view", entry_ids=entry_ids)
        return message

    # ------------------------------------------------------------ idle (delivery_rules.py)

    def _held_as(self, m: AgentMessage, when: When, action: Action) -> bool:
        p = self.pending_of(m)
        return p is not None and decide(p.kind, when) is action

    def take_idle(self, when: When | None = None) -> PendingTurn | None:
        """What starts a turn on the idle session now (`decide` of each held injection is START_TURN),
        held in order; None when nothing does. The rest waits (next-turn kinds for a prompt). `when`:
        the moment to ask for, else the session's own (idle, with or without an active task)."""
        at = when if when is not None else idle(self.has_active_task())
        out = [m for m in self.next_turn if self._held_as(m, at, Action.START_TURN)]
        if not out:
            return None
        self.next_turn = [m for m in self.next_turn if m not in out]
        return self._turn(out)

    def recordable(self) -> list[CustomMessage]:
        """Held injections an idle session records (idle.py; RECORD_IDLE in delivery_rules.py), none
        past a kept prompt. A follow-up (`background_result`) keeps waiting for the next turn."""
        cut = next((i for i, m in enumerate(self.next_turn) if isinstance(m, UserMessage)), len(self.next_turn))
        return [m for m in self.next_turn[:cut]
                if isinstance(m, CustomMessage) and self._held_as(m, When.IDLE, Action.RECORD_IDLE)]

    def take_recordable(self, chosen: Sequence[AgentMessage]) -> list[AgentMessage]:
        """`chosen` out of the next-turn list, in its order."""
        taken = {id(m) for m in chosen}
        out = [m for m in self.next_turn if id(m) in taken]
        self.next_turn = [m for m in self.next_turn if id(m) not in taken]
        return out

    def put_back(self, left: Sequence[AgentMessage]) -> bool:
        """Taken but not recorded: the pending ones back in front. False when one of `left` was no
        injection (an anchor the caller put before them)."""
        held = [m for m in left if self.pending_of(m) is not None]
        self.next_turn = [*held, *self.next_turn]
        return len(held) == len(left)

    # ------------------------------------------------------------ after a run

    def hold_queued(self) -> bool:
        """After a yield (docs/architecture.md "Delivery, yield and the idle rules"): what the Agent's
        queues hold joins the next-turn list, in order, for the idle rules. True when a user prompt
        was among it (the user spoke: a new turn, `take_user_turn`)."""
        kept = self.agent.take_queued()
        self.next_turn = [*self.next_turn, *kept]
        return any(self.prompt_of(m) is not None for m in kept)

    def keep_aborted(self) -> int:
        """After an abort (abort.py): what the Agent's queues hold goes first in the next turn, in
        order. The number kept."""
        kept = self.agent.take_queued()
        self.next_turn = [*kept, *self.next_turn]
        return len(kept)

    def take_user_turn(self) -> PendingTurn:
        """The held prompts as one user turn: the held injections first, then the prompts with their
        view (and prompt-time hints) in their order, as a prompt's own turn is built."""
        injected = {id(m) for m in self.next_turn if self.pending_of(m) is not None and not is_client_view(m)}
        out = [m for m in self.next_turn if id(m) in injected] + [m for m in self.next_turn if id(m) not in injected]
        self.next_turn = []
        return self._turn(out)

    def take_next_turn(self, then: list[AgentMessage] | None = None) -> PendingTurn:
        """The next-turn list, then `then` (a failed run's unrecorded prompts), as one turn."""
        out: list[AgentMessage] = [*self.next_turn, *(then or [])]
        self.next_turn = []
        return self._turn(out)

    def requeue_untaken(self) -> None:
        """Injections a failed run had taken from the queues but not recorded go back to the front of
        the next-turn list (their inbox entries are still unacked)."""
        queued = self._queued()
        lost = [p.message for p in self.pending.values()
                if id(p.message) not in queued and (p.source, p.source_id) not in self.transcript.sources]
        self.next_turn = lost + self.next_turn

    def untaken_prompts(self, exclude: list[AgentMessage]) -> list[UserMessage]:
        """Prompts a failed run had taken from the steer / follow-up queues but not recorded (their
        inbox entries are still unacked), except those in `exclude` (the failed run's own input)."""
        return [p.message for p in self._untaken(exclude)]

    def _untaken(self, exclude: list[AgentMessage]) -> list[PendingPrompt]:
        held = {id(m) for m in (*self.next_turn, *self.agent.queued(), *exclude)}
        return [p for p in self.prompts if id(p.message) not in held and p.prompt_id not in self.transcript.prompts]

    def rejoin_untaken(self, exclude: list[AgentMessage]) -> None:
        """After a failed run (supervisor.py `recover`): the prompts it took but did not record go back
        into the run task's next run, each where `decide` says of an accepted prompt while running (a
        steer is taken first, a follow-up when that run would stop)."""
        for p in self._untaken(exclude):
            into_run(self.agent, decide(Prompt(p.on_busy, accepted=True), When.RUNNING), [p.message])

    def join_run(self, turn: PendingTurn) -> None:
        """A turn built for the idle session meets a run started meanwhile (supervisor.py `start_run`: at
        the wake barrier a form answered while dormant can start one for an active task before the held
        prompt's turn is built): into the run where `decide` says while running. A prompt's turn as one,
        by its own prompt (accepted: its turn is built); else each injection by its kind, one that does
        not enter a run waiting in the next-turn list."""
        if turn.prompts:
            into_run(self.agent, decide(Prompt(turn.prompts[-1].on_busy, accepted=True), When.RUNNING), turn.messages)
            return
        for m in turn.messages:
            p = self.pending_of(m)
            if p is None or not into_run(self.agent, decide(p.kind, When.RUNNING), [m]):
                self.next_turn.append(m)
