"""The turn builder (the seed's "Session protocol controller"): the one place where restored anchors,
pending injections, the prompt's client_view, its prompt-time hints and the user message are put in
order. What waits lives in the pending queue (pending_queue.py, its one owner); a prompt reaches it
only through here (its turn taken once), and its turn is
handed out as a `PendingTurn`: its messages plus what the recorder needs. The order itself is a pure
function (`turn_messages`); the builder keeps only the todo anchor's revision (the anchor goes again
into the context once the todo changed since it was last there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from services.runtime.engine.agent import Agent
from services.runtime.live.pending import PendingTurn, Taken, TurnInput
from services.runtime.skillset.skill_lifecycle import scope
from services.runtime.skillset.skills import Skill, parse_skill_command, resolve_activation
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript
from services.runtime.tools.skill import render_skill
from services.runtime.turns.attachments import prompt_messages
from services.runtime.turns.knowledge import knowledge_anchors
from services.runtime.turns.pending_queue import PendingQueue
from shared.contracts.records.messages import AgentMessage, CustomMessage, UserMessage
from shared.trust.trusted_blocks import render


def active_skill_message(skill: Skill, required_by: str | None) -> CustomMessage:
    return CustomMessage(
        custom_type="gamma.active_skill", content=render("active_skill", None, render_skill(skill)),
        display=False, details={"trusted": True, "injectionType": "active_skill", "source": "system",
                                "skill": skill.name, "skillType": skill.type, "requiredBy": required_by},
    )


def turn_messages(anchor: Sequence[AgentMessage], queued: Sequence[AgentMessage], skills: Sequence[CustomMessage],
                  notes: Sequence[AgentMessage], hints: Sequence[AgentMessage], user: UserMessage) -> list[AgentMessage]:
    """A prompt's turn in order: the todo anchor when due, what was queued for it (arrival order, its
    client_view last), `/skill` activations, the prompt's attachment note, its prompt-time hints, then
    the user message (user authority, never parsed for tags)."""
    return [*anchor, *queued, *skills, *notes, *hints, user]


class TurnBuilder:
    def __init__(self, queue: PendingQueue, agent: Agent, transcript: Transcript, todo: TodoController,
                 skills: Mapping[str, Skill], extra_anchors: Sequence[Callable[[], CustomMessage | None]] = ()) -> None:
        self.queue = queue
        self.agent = agent
        self.transcript = transcript
        self.todo = todo
        self.skills = skills
        self._anchor_revision = self._last_todo_revision()
        # Other owners' anchors restored after a compaction (e.g. checklist progress, progress.py).
        self.extra_anchors = tuple(extra_anchors)

    def build(self, turn: TurnInput) -> PendingTurn:
        """A prompt's turn: what it takes from the queue (one take), in order. Idle: the due anchor, the
        whole next-turn list and `/skill` activations come with it; during a run (`busy`): only its own
        view, notes, hints and user message, to be steered or followed up into the run as they are."""
        prompt = turn.prompt
        notes, user = prompt_messages(prompt)
        taken: Taken = self.queue.take_for_prompt(prompt, turn.entry_id, user, turn.hints, busy=turn.busy)
        anchor: list[AgentMessage] = []
        skills: list[CustomMessage] = []
        if not turn.busy:
            anchor = self._due_anchor()
            name = parse_skill_command(prompt.message)
            skills = self.activate_skill(name) if name is not None and name in self.skills else []
        messages = turn_messages(anchor, taken.queued, skills, notes, taken.hints, user)
        return PendingTurn(messages, taken.prompts, taken.injections)

    # ------------------------------------------------------------ idle recording (idle.py)

    def take_recordable(self, chosen: Sequence[AgentMessage]) -> list[AgentMessage]:
        """`chosen` out of the queue, after the todo anchor when one is due, as the next turn would have
        ordered them (the cached prompt prefix holds)."""
        out = self.queue.take_recordable(chosen)
        return [*self._due_anchor(), *out] if out else []

    def put_back(self, left: Sequence[AgentMessage]) -> None:
        """Taken but not recorded: back in front, still pending; an unrecorded anchor is due again (no
        revision is in the context's anchor until one is recorded)."""
        if not self.queue.put_back(left):
            self._anchor_revision = None

    def _due_anchor(self) -> list[AgentMessage]:
        if not self.todo.current.items or self._anchor_revision == self.todo.current.revision:
            return []
        self._anchor_revision = self.todo.current.revision
        return [self.todo.anchor()]

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
        self._anchor_revision = self._last_todo_revision(self.agent.messages)

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
