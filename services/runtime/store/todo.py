"""The todo controller: owner of `todo.json` (docs/architecture.md "Ownership": only the runtime writes it). The `todo` tool calls `update`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from services.runtime.store.write_guard import Guard
from shared.contracts.records.messages import CustomMessage
from shared.contracts.records.todo import TodoItem, TodoList, task_state_problem, waiting
from shared.storage.disk import atomic_write_json, read_json
from shared.trust.trusted_blocks import lines, quoted
from shared.trust.trusted_blocks import render as render_block


class TodoRefused(ValueError):
    pass


class TodoController:
    def __init__(self, path: Path, guard: Guard) -> None:
        self.path = path
        self._guard = guard
        self.current = TodoList()

    @classmethod
    def load(cls, path: Path, guard: Guard) -> TodoController:
        return cls.of(path, guard, read_json(path))

    @classmethod
    def of(cls, path: Path, guard: Guard, raw: Any) -> TodoController:
        """The controller of `path` whose content is `raw` (parsed JSON, None when absent)."""
        c = cls(path, guard)
        if raw is not None:
            try:
                c.current = TodoList.model_validate(raw)
            except ValidationError:
                c.current = TodoList()  # a broken file must not stop the session; the next update rewrites it
        return c

    def reload(self) -> None:
        """The list as todo.json holds it now (after a rewind restored the file)."""
        self.current = TodoController.load(self.path, self._guard).current

    @property
    def has_active_task(self) -> bool:
        """Open work, a waiting task included: an update or a form answer resumes it (the seed: "A
        steering event only starts a turn for an active task")."""
        return waiting(self.current.items)

    async def update(self, items: list[dict[str, Any]]) -> TodoList:
        """Replace the list; refuses (clearly) an update that breaks the task-state rule (open tasks and
        not exactly one in_progress, `task_state_problem`), duplicate ids, bad statuses."""
        try:
            parsed = [TodoItem.model_validate(i) for i in items]
        except ValidationError as exc:
            raise TodoRefused(f"invalid task: {_first_error(exc)}") from exc
        problem = task_state_problem(parsed)
        if problem is not None:
            raise TodoRefused(problem)
        try:
            new = TodoList(revision=self.current.revision + 1, items=parsed)
        except ValidationError as exc:
            raise TodoRefused(_first_error(exc)) from exc
        def written(_: None) -> None:  # the file holds it: so does memory, even if we are cancelled now
            self.current = new

        await self._guard.write(lambda: atomic_write_json(self.path, new), written)
        return new

    def anchor(self) -> CustomMessage:
        """The hidden context anchor restored after compaction (and on wake when stale)."""
        return CustomMessage(
            custom_type="gamma.todo_anchor", content=render(self.current), display=False,
            details={"trusted": True, "injectionType": "todo_anchor", "source": "system",
                     "revision": self.current.revision},
        )


def render(todo: TodoList) -> str:
    """The model wrote the items' ids and text: the builder escapes them (docs/architecture.md
    "Trust boundaries")."""
    items = [f"- [{item.status}] {item.id}: {item.content}" + (f" (waiting: {item.reason})" if item.status == "blocked"
             and item.reason else "") for item in todo.items] or ["(no tasks)"]
    # The ids, texts and reasons are the model's own words: quoted, so a line of them never reads as the
    # harness's (docs/architecture.md "Trust boundaries").
    return render_block("todo_state", {"revision": todo.revision},
                        lines("Your task list, as you wrote it:", quoted("model", "\n".join(items))))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{loc}: {err.get('msg')}" if loc else str(err.get("msg"))
