"""The session as the tools see it (tools/ports.py's ToolHost): artifact changes, tabs and forms,
todo and skill events, subagents. The UI document stays the session's (`UiHost`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from services.runtime.engine.types import StreamFn
from services.runtime.live.events import Outbox
from services.runtime.runs.subagent import Subagents
from services.runtime.sandbox import Sandbox
from services.runtime.skillset.audit import Auditor
from services.runtime.skillset.skill_lifecycle import SkillContracts
from services.runtime.skillset.skills import Skill
from services.runtime.store.document_reads import DocumentReads
from services.runtime.store.file_reads import FileReads
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import Guard
from services.runtime.ui.liveui import UiHost
from services.runtime.ui.viewable import ViewableFiles
from shared.contracts.records.todo import TodoList
from shared.contracts.records.transcript import Deviation
from shared.contracts.streams.artifacts import ArtifactChange
from shared.costs import user_disk
from shared.redis import keys, revnum
from shared.settings import Settings
from shared.storage.blobs import write_blob
from shared.storage.disk import SessionPaths, workspace_files
from shared.storage.quota import WorkspaceQuota

T = TypeVar("T")


class SessionToolHost:
    def __init__(self, *, sid: str, paths: SessionPaths, settings: Settings, sandbox: Sandbox,
                 todo: TodoController, skills: Mapping[str, Skill], transcript: Transcript, outbox: Outbox,
                 guard: Guard, ui: UiHost, subagent_stream: Callable[[], StreamFn],
                 client: Any, background: set[asyncio.Task[None]], contracts: SkillContracts,
                 auditor: Auditor | None = None) -> None:
        self.sid = sid
        self.paths = paths
        self.data_dir = settings.storage.data_dir
        self.max_file_bytes = settings.storage.max_file_bytes
        self.user_disk_bytes = settings.storage.user_disk_bytes  # all of the owner's sessions (shared/costs/user_disk.py)
        self.image_limits = settings.images.image_limits()
        self.image_settings = settings.images
        self._owner: str | None = None
        self.workspace_quota = WorkspaceQuota.from_settings(settings)
        self.sandbox = sandbox  # probed once per process
        self.todo = todo
        self.skills = skills
        self.transcript = transcript
        self.outbox = outbox
        self.contracts = contracts  # skill activations and their ends (skill_lifecycle.py)
        self._guard = guard
        self.uihost = ui
        self.client = client  # Redis: numbers file changes (shared/redis/revnum.py)
        # A subagent answers through the session's inbox.
        self.subagents = Subagents(self, subagent_stream, client, background)
        # The server-owned projection: filled at the wake (refresh_viewable), then kept up to date by
        # every file change, so no walk of a workspace a command may have made huge runs per change;
        # each change is sent to the clients (viewable.py).
        self.viewable = ViewableFiles(lambda data: self.outbox.event("viewable_files", data), background)
        self._max_depth = settings.storage.workspace_max_depth
        self.document_reads = DocumentReads(lambda: transcript.entries)  # what a deck write must still find
        self.file_reads = FileReads(lambda: transcript.entries, lambda: transcript.w.base_seen)  # what a file write or edit must still find
        self.auditor = auditor  # completion audits (audit.py)

    async def guard(self) -> None:
        await self._guard()

    async def tenant(self) -> str:
        if self._owner is None:
            owner = await self.client.hget(keys.session_row(self.sid), "owner")
            self._owner = (owner.decode() if isinstance(owner, bytes) else owner) or self.sid
        return self._owner

    async def guarded_write(self, fn: Callable[[], T]) -> T:
        return await self._guard.write(fn)

    async def over_user_budget(self, adding: int, what: str) -> str | None:
        return await user_disk.measures(self.data_dir).admit(self.client, await self.tenant(), adding, what,
                                                             self.user_disk_bytes)

    def user_disk_changed(self) -> None:
        if self._owner is not None:
            user_disk.measures(self.data_dir).forget(self._owner)

    @property
    def viewable_files(self) -> list[str]:
        return self.viewable.files

    async def refresh_viewable(self, announce: bool = False, walked: list[str] | None = None) -> None:
        """The projection from a bounded walk in the I/O pool (shared/storage/disk.py `workspace_files`): a
        partial list when the workspace is past the walk's bounds, never a failed wake. `announce`:
        send it whole (a rewind changed the files; a wake's `status` event carries it instead).
        `walked`: that walk, done by the wake's read (session_files.py)."""
        files = walked if walked is not None else await asyncio.to_thread(
            workspace_files, self.paths.workspace, max_depth=self._max_depth)
        if announce:
            await self.viewable.replaced(files)
        else:
            self.viewable.replace(files)

    def client_saved(self, path: str, revision: int | None) -> None:
        """A client's live write of `path` (writes.py): named when the agent's write of it is refused."""
        self.file_reads.client_saved(path, revision)

    def track(self, *paths: str, deleted: bool = False) -> None:
        """Keep the projection: the agent's file changes here, a client's (writes.py) through this."""
        self.viewable.track(*paths, deleted=deleted)

    async def artifact_changed(self, ref: str, kind: str, *, document: dict[str, Any] | None = None, deleted: bool = False,
                               content: bytes | None = None) -> None:
        """`content`: a file's new bytes. They go to a content
        blob on the session disk (shared/storage/blobs.py); the ArtifactChange only names it."""
        if kind == "file":
            self.track(ref.removeprefix("file:"), deleted=deleted)
        # A file change is numbered like the user's live writes, so theirs stay in step with the digest.
        revision = await revnum.next_revision(self.client, self.sid, ref) if kind == "file" else None
        change = ArtifactChange(session_id=self.sid, ref=ref, actor="agent", kind=kind,  # type: ignore[arg-type]
                                document=document, deleted=deleted, to_revision=revision)
        if content is not None and not deleted:
            name = "b_" + change.id
            sha = await asyncio.to_thread(write_blob, self.data_dir, self.sid, name, content)
            change = change.model_copy(update={"blob": name, "sha256": sha, "size": len(content)})
        await self.outbox.publish(keys.ARTIFACT_CHANGES, change)

    async def open_tab(self, ari: str, title: str | None) -> str:
        tab, update = await (await self.uihost.document()).open_tab(ari, title)
        await self.uihost.persist_ui()
        await self.uihost.publish_ui(update)
        return tab

    async def show_form(self, form: dict[str, Any]) -> str:
        ui = await self.uihost.document()
        form_update = await ui.set_form(form)
        tab, tab_update = await ui.open_tab(f"form:{form['id']}", str(form.get("title") or form["id"]))
        await self.uihost.persist_ui()
        await self.uihost.publish_ui(form_update)
        await self.uihost.publish_ui(tab_update)
        return tab

    async def todo_changed(self, todo: TodoList, tool_call_id: str) -> None:
        await self.outbox.event("todo", {"todo": todo.model_dump(), "toolCallId": tool_call_id})

    def skill_scope(self, incoming: list[str]) -> set[str]:
        return self.contracts.scope(incoming)

    def active_skill_names(self) -> set[str]:
        return self.contracts.names()

    async def record_activation(self, skill: Skill, required_by: str | None) -> None:
        await self.contracts.activate(skill, required_by)

    async def start_subagent(self, task: str, tool_call_id: str) -> str:
        return self.subagents.start(task, tool_call_id)

    async def message_user(self, message: str, block_on_user: bool, tool_call_id: str) -> None:
        await self.outbox.event("message_user", {"message": message, "block_on_user": block_on_user,
                                                 "tool_call_id": tool_call_id})

    async def audit_completion(self, message: str, deviations: list[Deviation], tool_call_id: str) -> str | None:
        return None if self.auditor is None else await self.auditor.check(message, deviations, tool_call_id)
