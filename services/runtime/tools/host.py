"""What the tools need from their session, as a Protocol: tools stay values with no session import."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from shared.contracts.todo import TodoList
from shared.contracts.transcript import Deviation
from shared.disk import SessionPaths
from shared.image_limits import ImageLimits
from shared.quota import WorkspaceQuota

from ..document_reads import DocumentReads
from ..sandbox import Sandbox
from ..skills import Skill
from ..todo import TodoController


class ToolHost(Protocol):
    sid: str
    paths: SessionPaths
    max_file_bytes: int
    image_limits: ImageLimits
    workspace_quota: WorkspaceQuota
    sandbox: Sandbox  # confines every process started for the agent (bash)
    todo: TodoController
    skills: Mapping[str, Skill]
    document_reads: DocumentReads  # the revision of each deck the agent last read (show_gamma)

    async def guard(self) -> None: ...

    async def artifact_changed(self, ref: str, kind: str, *, document: dict[str, Any] | None = None, deleted: bool = False,
                               content: bytes | None = None) -> None: ...

    async def open_tab(self, ari: str, title: str | None) -> str: ...

    async def show_form(self, form: dict[str, Any]) -> str: ...

    async def todo_changed(self, todo: TodoList, tool_call_id: str) -> None: ...

    def skill_scope(self, incoming: list[str]) -> set[str]:
        """The live skills a conflict check of `incoming` runs against (services/runtime/skill_lifecycle.py)."""
        ...

    async def record_activation(self, skill: Skill, required_by: str | None) -> None: ...

    async def start_subagent(self, task: str, tool_call_id: str) -> str: ...

    async def message_user(self, message: str, block_on_user: bool, tool_call_id: str) -> None: ...

    async def audit_completion(self, message: str, deviations: list[Deviation], tool_call_id: str) -> str | None: ...
