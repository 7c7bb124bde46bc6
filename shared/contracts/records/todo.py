"""`sessions/{sid}/todo.json`, owned by the runtime's todo controller."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from shared.contracts.base import Contract

TaskStatus = Literal["pending", "in_progress", "complete", "blocked"]


class TodoItem(Contract):
    id: str = Field(min_length=1, max_length=64)
    content: str = Field(min_length=1, max_length=2000)
    status: TaskStatus = "pending"
    # What a blocked task waits for (the user's answer, an import): a blocked task is a wait, still
    # active work, and an update marking a task blocked must say why (`task_state_problem`).
    reason: str | None = Field(None, max_length=500)


class TodoList(Contract):
    revision: int = 0
    items: list[TodoItem] = Field(default_factory=list, max_length=200)

    @model_validator(mode="after")
    def _one_in_progress(self) -> TodoList:
        active = [i.id for i in self.items if i.status == "in_progress"]
        if len(active) > 1:
            raise ValueError(f"exactly one task may be in_progress; got {len(active)}: {', '.join(active)}")
        ids = [i.id for i in self.items]
        if len(set(ids)) != len(ids):
            raise ValueError("task ids must be unique")
        return self


ONE_IN_PROGRESS = ("while any task is pending or in_progress, exactly one task is in_progress, unless a "
                   "task waits (blocked, with its reason)")


def task_state_problem(items: list[TodoItem]) -> str | None:
    """The seed's task-state rule for an update ("Exactly one task can have the in_progress status",
    while work is open): None when it holds, else what is wrong, naming the rule. A task that waits
    on the user or an outside event is `blocked` with its reason, and while one waits the later tasks
    may stay pending with none in_progress (the wait resumes the work: docs/architecture.md
    "Delivery, yield and the idle rules"). A stored list is read with the weaker "at most one" of
    `TodoList`: a list on disk that breaks this rule still loads instead of being dropped, and the
    agent's next update must satisfy it."""
    active = [i.id for i in items if i.status == "in_progress"]
    pending = [i.id for i in items if i.status == "pending"]
    unexplained = [i.id for i in items if i.status == "blocked" and not (i.reason or "").strip()]
    if len(active) > 1:
        return (f"{ONE_IN_PROGRESS}; you marked {len(active)}: {', '.join(active)}. Mark one in_progress and "
                "the others pending, complete or blocked.")
    if unexplained:
        return (f"a blocked task says what it waits for; {', '.join(unexplained[:10])} has no reason. Give each "
                "blocked task a `reason` (e.g. \"waiting for the user's answer\").")
    if pending and not active and not any(i.status == "blocked" for i in items):
        return (f"{ONE_IN_PROGRESS}; you left {len(pending)} pending ({', '.join(pending[:10])}) and none "
                "in_progress. Mark the task you work on now in_progress, or mark the task that waits on the "
                "user or an external event blocked with its reason (later tasks may then stay pending).")
    return None


def waiting(items: list[TodoItem]) -> bool:
    """Work is open: a task is pending or in progress, or waits (blocked) for what resumes it."""
    return any(i.status in ("in_progress", "pending", "blocked") for i in items)
