"""TurnOrder (the seed's "Session protocol controller"): the one place where restored
state, pending injections, the prompt's client_view and the user message are put in order.

It keeps no state store of its own: pending injections live in the Agent's steer/follow-up queues
or in the next-turn list (Pi's `_pendingNextTurnMessages`), each remembered (by its source and
source id, which its message carries) with the inbox entries to ack once its transcript entry is
durable. A turn is handed out as a `PendingTurn`: its messages plus what the recorder needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from services.runtime.engine.agent import Agent
from services.runtime.live.pending import PendingInjection, PendingPrompt, PendingTurn, TurnInput
from services.runtime.skillset.skill_lifecycle import scope
from services.runtime.skillset.skills import Skill, parse_skill_command, resolve_activation
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript
from services.runtime.tools.skill import render_skill
from services.runtime.turns.attachments import client_view_content, prompt_messages
from services.runtime.turns.delivery_rules import Action, Found, When, decide, idle, moment
from services.runtime.turns.knowledge import knowledge_anchors
from shared.contracts.inbox import Injection, UserPrompt
from shared.contracts.injection import RuntimeInjection
from shared.contracts.messages import AgentMessage, CustomMessage, UserMessage
from shared.trust.trusted_blocks import artifact_update, ensure_block, render


def source_key(message: AgentMessage) -> tuple[str, str] | None:
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


def active_skill_message(skill: Skill, required_by: str | None) -> CustomMessage:
    return CustomMessage(
        custom_type="gamma.active_skill", content=render("active_skill", None, render_skill(skill)),
        display=False, details={"trusted": True, "injectionType": "active_skill", "source": "system",
                                "skill": skill.name, "skillType": skill.type, "requiredBy": required_by},
    )


class TurnOrder:
    def __init__(self, agent: Agent, transcript: Transcript, todo: TodoController,
                 skills: Mapping[str, Skill], has_active_task: Callable[[], bool],
                 extra_anchors: Sequence[Callable[[], CustomMessage | None]] = ()) -> None:
        self.agent = agent
        self.transcript = transcript
        self.todo = todo
        self.skills = skills
        self.has_active_task = has_active_task
        self.next_turn: list[AgentMessage] = []  # next-turn and idle-held injections (abort.py: kept prompts)
        # (source, source id) -> the queued or in-flight injection with its inbox entries
        self.pending: dict[tuple[str, str], PendingInjection] = {}
        self.prompts: list[PendingPrompt] = []  # prompts not yet recorded, arrival order
        self.anchor_revision = self._last_todo_revision()
        # Other owners' anchors restored after a compaction (e.g. checklist progress, progress.py).
        self.extra_anchors = tuple(extra_anchors)

    # ------------------------------------------------------------ injections

    def pending_of(self, message: AgentMessage) -> PendingInjection | None:
        key = source_key(message)
        p = self.pending.get(key) if key is not None else None
        return p if p is not None and p.message is message else None

    def take_injection(self, message: AgentMessage) -> PendingInjection | None:
        """The recorder's look-up when `message` is recorded: its injection, no longer pending."""
        p = self.pending_of(message)
        if p is not None:
            del self.pending[(p.source, p.source_id)]
        return p

    def prompt_of(self, message: AgentMessage) -> PendingPrompt | None:
        return next((p for p in self.prompts if p.message is message), None)

    def pending_prompt(self, prompt_id: str) -> PendingPrompt | None:
        return next((p for p in self.prompts if p.prompt_id == prompt_id), None)

    def take_prompt(self, message: AgentMessage) -> PendingPrompt | None:
        p = self.prompt_of(message)
        if p is not None:
            self.prompts.remove(p)
        return p

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
            if not self.agent.replace_queued(old.message, message):
                self.next_turn = [message if m is old.message else m for m in self.next_turn]
            return Found.MERGED
        self.pending[(pending.source, pending.source_id)] = pending
        action = decide(kind, moment(held=hold, running=self.agent.is_running, active_task=self.has_active_task))
        if action is Action.STEER or action is Action.FOLLOW_UP:
            (self.agent.steer if action is Action.STEER else self.agent.follow_up)(message)
        else:
            self.next_turn.append(message)
        return action

    def _queued_same_target(self, inj: Injection) -> PendingInjection | None:
        """A still-queued injection the new one replaces (not one already handed to the model)."""
        kind = inj.injection.kind
        queued = {id(m) for m in (*self.next_turn, *self.agent.queued())}
        for p in self.pending.values():
            if id(p.message) not in queued:
                continue
            if p.message.details.get("injectionType") != kind:
                continue
            if kind == "client_view" or (kind == "artifact_update" and inj.ref and p.ref == inj.ref):
                return p
        return None

    def artifact_recorded(self, ref: str, told: int) -> list[PendingInjection]:
        """An artifact_update for `ref` up to revision `told` was just recorded. A queued one for the
        same ref that the digest builder composed before that (from an older revision) would repeat
        part of it: it is restated from `told`, or dropped when `told` covers it all. Returns the
        dropped ones, for the caller to ack as recorded."""
        queued = {id(m) for m in (*self.next_turn, *self.agent.queued())}
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
                if not self.agent.replace_queued(p.message, message):
                    self.next_turn = [message if m is p.message else m for m in self.next_turn]
        return dropped

    def requeue_untaken(self) -> None:
        """Injections a failed run had taken from the queues but not recorded go back to the front of
        the next-turn list (their inbox entries are still unacked)."""
        queued = {id(m) for m in (*self.next_turn, *self.agent.queued())}
        recorded = set(self.transcript.sources)
        lost = [p.message for p in self.pending.values()
                if id(p.message) not in queued and (p.source, p.source_id) not in recorded]
        self.next_turn = lost + self.next_turn

    def untaken_prompts(self, exclude: list[AgentMessage]) -> list[UserMessage]:
        """Prompts a failed run had taken from the steer / follow-up queues but not recorded (their
        inbox entries are still unacked), except those in `exclude` (the failed run's own input)."""
        held = {id(m) for m in (*self.next_turn, *self.agent.queued(), *exclude)}
        return [p.message for p in self.prompts
                if id(p.message) not in held and p.prompt_id not in self.transcript.prompts]

    def _turn(self, messages: Sequence[AgentMessage]) -> PendingTurn:
        injections = [p for p in map(self.pending_of, messages) if p is not None]
        prompts = [p for p in map(self.prompt_of, messages) if p is not None]
        return PendingTurn(list(messages), prompts, injections)

    def take_next_turn(self, then: list[AgentMessage] | None = None) -> PendingTurn:
        """The next-turn list, then `then` (a failed run's unrecorded prompts), as one turn."""
        out: list[AgentMessage] = [*self.next_turn, *(then or [])]
        self.next_turn = []
        return self._turn(out)

    def _held_as(self, m: AgentMessage, when: When, action: Action) -> bool:
        p = self.pending_of(m)
        return p is not None and decide(p.kind, when) is action

    def take_idle(self) -> PendingTurn:
        """What starts a turn on an idle session with an active task (delivery_rules.py), held in order;
        the rest waits (next-turn kinds for a prompt)."""
        out = [m for m in self.next_turn if self._held_as(m, When.IDLE_TASK_ACTIVE, Action.START_TURN)]
        self.next_turn = [m for m in self.next_turn if m not in out]
        return self._turn(out)

    def take_idle_peek(self) -> bool:
        return any(self._held_as(m, When.IDLE_TASK_ACTIVE, Action.START_TURN) for m in self.next_turn)

    def idle_turn_due(self) -> bool:
        """Something held starts a turn now, the session being idle (delivery_rules.py `decide`)."""
        when = idle(self.has_active_task())
        return any(self._held_as(m, when, Action.START_TURN) for m in self.next_turn)

    def recordable(self) -> list[CustomMessage]:
        """Held injections an idle session records (idle.py; RECORD_IDLE in delivery_rules.py), none
        past a kept prompt. A follow-up (`background_result`) keeps waiting for the next turn."""
        cut = next((i for i, m in enumerate(self.next_turn) if isinstance(m, UserMessage)), len(self.next_turn))
        return [m for m in self.next_turn[:cut]
                if isinstance(m, CustomMessage) and self._held_as(m, When.IDLE, Action.RECORD_IDLE)]

    def take_recordable(self, chosen: Sequence[AgentMessage]) -> list[AgentMessage]:
        """`chosen` out of the next-turn list, after the todo anchor when one is due, as the next turn
        would have ordered them (the cached prompt prefix holds)."""
        taken = {id(m) for m in chosen}
        out = [m for m in self.next_turn if id(m) in taken]
        self.next_turn = [m for m in self.next_turn if id(m) not in taken]
        return [*self._due_anchor(), *out] if out else []

    def put_back(self, left: Sequence[AgentMessage], anchor_before: int | None) -> None:
        """Taken but not recorded: back in front, still pending; an unrecorded anchor is due again."""
        held = [m for m in left if self.pending_of(m) is not None]
        self.anchor_revision = anchor_before if len(held) < len(left) else self.anchor_revision
        self.next_turn = [*held, *self.next_turn]

    def _due_anchor(self) -> list[AgentMessage]:
        if not self.todo.current.items or self.anchor_revision == self.todo.current.revision:
            return []
        self.anchor_revision = self.todo.current.revision
        return [self.todo.anchor()]

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
        injected = {id(m) for m in self.next_turn if self.pending_of(m) is not None and not self._is_client_view(m)}
        out = [m for m in self.next_turn if id(m) in injected] + [m for m in self.next_turn if id(m) not in injected]
        self.next_turn = []
        return self._turn(out)

    # ------------------------------------------------------------ turns

    def build_turn_messages(self, turn: TurnInput) -> PendingTurn:
        """restored anchors, pending injections (arrival order), the prompt's client_view, /skill
        activations, then the user message."""
        out = self._due_anchor()
        prompt = turn.prompt
        if prompt is not None and prompt.client_context is not None:
            view = self._prompt_client_view(prompt)  # replaces the queued views, before they are taken
            queued, self.next_turn = [*self.next_turn, view], []
        else:
            queued, self.next_turn = list(self.next_turn), []
            views = [m for m in queued if self._is_client_view(m)]
            queued = [m for m in queued if not self._is_client_view(m)] + views[-1:]
        out.extend(queued)
        if prompt is not None:
            name = parse_skill_command(prompt.message)
            if name is not None and name in self.skills:
                out.extend(self.activate_skill(name))
            notes, user = prompt_messages(prompt)
            self.prompts.append(PendingPrompt(prompt.prompt_id, turn.entry_id, user))
            out.extend([*notes, user])
        return self._turn(out)

    def busy_turn_messages(self, prompt: UserPrompt, entry_id: str) -> PendingTurn:
        """A prompt that arrives during a run (steer / follow_up): its sender's client_view, then the
        user message (user authority, never parsed for tags)."""
        out: list[AgentMessage] = []
        if prompt.client_context is not None:
            out.append(self._prompt_client_view(prompt))
        notes, user = prompt_messages(prompt)
        self.prompts.append(PendingPrompt(prompt.prompt_id, entry_id, user))
        out.extend([*notes, user])
        return self._turn(out)

    def _is_client_view(self, m: AgentMessage) -> bool:
        return isinstance(m, CustomMessage) and m.custom_type == "gamma.client_view"

    def _prompt_client_view(self, prompt: UserPrompt) -> CustomMessage:
        """The prompt's view. The latest client_view replaces the older ones still queued (the
        next-turn list, or a steered prompt's in the Agent's queues); they are acked with it."""
        assert prompt.client_context is not None
        queued = [m for m in (*self.next_turn, *self.agent.queued()) if self._is_client_view(m)]
        old = [p for p in map(self.pending_of, queued) if p is not None]
        self.next_turn = [m for m in self.next_turn if not self._is_client_view(m)]
        for m in queued:
            self.agent.remove_queued(m)
        message = CustomMessage(custom_type="gamma.client_view", content=client_view_content(prompt.client_context),
                                details={"trusted": True, "injectionType": "client_view", "source": "client",
                                         "sourceId": f"{prompt.prompt_id}#client_view"})
        entry_ids = [e for p in old for e in p.entry_ids]
        for p in old:
            del self.pending[(p.source, p.source_id)]
        self.pending[("client", f"{prompt.prompt_id}#client_view")] = PendingInjection(message=message, source="client",
                                                     source_id=f"{prompt.prompt_id}#client_view",
                                                     kind="client_view", entry_ids=entry_ids)
        return message

    # ------------------------------------------------------------ skills and restore

    def activate_skill(self, name: str) -> list[CustomMessage]:
        """`/skill:NAME`: the skill and its required skills become active (entries written by the
        session when these messages are recorded); their bodies enter as trusted messages."""
        try:
            skills = resolve_activation([name], self.skills, scope([name], self.transcript, self.skills))
        except ValueError:
            return []
        return [active_skill_message(s, None if s.name == name else name) for s in skills]

    def anchors(self) -> list[CustomMessage]:
        """What compaction removed and the owners restore: the todo anchor, every live skill contract
        (workflows, their references, references loaded on their own; ended ones are not restored,
        services/runtime/skillset/skill_lifecycle.py), and the loaded workspace knowledge notes. A preloaded
        skill is not restored: compaction never removed its body, which is in the system prompt."""
        out: list[CustomMessage] = []
        if self.todo.current.items:
            out.append(self.todo.anchor())
        for a in self.transcript.active_skills():
            skill = None if a.preloaded else self.skills.get(a.name)
            if skill is not None:
                out.append(active_skill_message(skill, a.required_by))
        out.extend(knowledge_anchors(self.transcript.loads))  # loaded workspace knowledge stays active
        out += [m for anchor in self.extra_anchors if (m := anchor()) is not None]
        return out

    def restore_context(self) -> None:
        """Reload the model context from the transcript (wake, after compaction)."""
        self.agent.replace_messages(self.transcript.context())
        self.anchor_revision = self._last_todo_revision(self.agent.messages)

    def _last_todo_revision(self, context: list[AgentMessage] | None = None) -> int | None:
        for m in reversed(context if context is not None else self.transcript.context()):
            if isinstance(m, CustomMessage) and m.custom_type == "gamma.todo_anchor":
                rev = m.details.get("revision")
                return rev if isinstance(rev, int) else None
            details = getattr(m, "details", None)
            if getattr(m, "tool_name", None) == "todo" and isinstance(details, dict) and "todo" in details:
                rev = details["todo"].get("revision")
                return rev if isinstance(rev, int) else None
        return None
