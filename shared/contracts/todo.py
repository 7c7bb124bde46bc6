"""`sessions/{sid}/todo.json`, owned by the runtime's todo controller."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Contract

TaskStatus = Literal["pending", "in_progress", "complete", "blocked"]


class TodoItem(Contract):
    id: str = Field(min_length=1, max_length=64)
    content: str = Field(min_length=1, max_length=2000)
    status: TaskStatus = "pending"


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
