"""What the tools need from their session, as narrow Protocols (one per kind of tool): tools stay values
with no session import."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from services.runtime.sandbox import Sandbox
from services.runtime.skillset.skills import Skill
from services.runtime.store.document_reads import DocumentReads
from services.runtime.store.file_reads import FileReads
from services.runtime.store.todo import TodoController
from shared.contracts.records.todo import TodoList
from shared.contracts.records.transcript import Deviation
from shared.media.image_limits import ImageLimits
from shared.settings.images import ImageSettings
from shared.storage.disk import SessionPaths
from shared.storage.quota import WorkspaceQuota

T = TypeVar("T")


class WorkspaceHost(Protocol):
    """The workspace as the file tools see it (read, write, edit; images)."""

    paths: SessionPaths
    max_file_bytes: int
    image_limits: ImageLimits
    image_settings: ImageSettings  # the decoding bounds (shared/pools/image_decoding.py)
    workspace_quota: WorkspaceQuota

    async def guard(self) -> None: ...

    async def tenant(self) -> str:
        """The session's owner: whose decodes in flight an image counts against."""
        ...

    async def guarded_write(self, fn: Callable[[], T]) -> T:
        """`fn` in the I/O pool with the lease checked and the disk fence held (write_guard.py)."""
        ...

    async def over_user_budget(self, adding: int, what: str) -> str | None:
        """Why `adding` more bytes would take the owner's sessions past their disk budget (shared/costs/user_disk.py),
        or None (then counted)."""
        ...

    def user_disk_changed(self) -> None:
        """The owner's disk changed by an amount not known here (a bash call): the next check measures."""
        ...

    async def artifact_changed(self, ref: str, kind: str, *, document: dict[str, Any] | None = None, deleted: bool = False,
                               content: bytes | None = None) -> None: ...


class AgentFilesHost(Protocol):
    """What the agent's own file tools need beyond the workspace (a subagent's read has neither): the
    skills whose files `read` opens (services/runtime/skillset/skill_files.py), and what the agent last saw of
    each file, which a write or an edit must still find (services/runtime/store/file_reads.py)."""

    skills: Mapping[str, Skill]
    file_reads: FileReads

    def active_skill_names(self) -> set[str]: ...


class ShellHost(WorkspaceHost, Protocol):
    sandbox: Sandbox  # confines every process started for the agent (bash)


class DisplayHost(WorkspaceHost, Protocol):
    """Tabs, forms and decks shown to the user (show_file, show_gamma)."""

    document_reads: DocumentReads  # the revision of each deck the agent last read (show_gamma)

    async def open_tab(self, ari: str, title: str | None) -> str: ...

    async def show_form(self, form: dict[str, Any]) -> str: ...


class TodoHost(Protocol):
    todo: TodoController

    async def todo_changed(self, todo: TodoList, tool_call_id: str) -> None: ...


class SkillHost(Protocol):
    skills: Mapping[str, Skill]

    def skill_scope(self, incoming: list[str]) -> set[str]:
        """The live skills a conflict check of `incoming` runs against (services/runtime/skillset/skill_lifecycle.py)."""
        ...

    async def record_activation(self, skill: Skill, required_by: str | None) -> None: ...


class MessageHost(Protocol):
    async def message_user(self, message: str, block_on_user: bool, tool_call_id: str) -> None: ...

    async def audit_completion(self, message: str, deviations: list[Deviation], tool_call_id: str) -> str | None: ...


class SubagentHost(Protocol):
    async def start_subagent(self, task: str, tool_call_id: str) -> str: ...


class ToolHost(ShellHost, DisplayHost, TodoHost, SkillHost, MessageHost, SubagentHost, AgentFilesHost, Protocol):
    """Every tool's port at once: what the whole tool set (Toolset) is built on. Each tool takes only
    its own narrow port above."""

    sid: str
