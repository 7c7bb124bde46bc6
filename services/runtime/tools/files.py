"""read / write / edit: inside the session workspace; every change is an ArtifactChange(agent). `read`
also opens a skill's own files, read-only (services/runtime/skillset/skill_files.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import Field

from services.runtime.engine.types import Tool, ToolContext, ToolOutcome
from services.runtime.skillset import skill_files
from services.runtime.skillset.paths import sandbox_skills_dir
from services.runtime.store.file_reads import canonical, current_sha, sha256
from services.runtime.tools.image_view import image_outcome, is_image
from services.runtime.tools.ports import AgentFilesHost, WorkspaceHost
from shared.mcp.tool_schema import ToolArgs, optional
from shared.storage import workspace_fs
from shared.storage.disk import DiskError, check_size, split_workspace_path
from shared.storage.disk_errors import InsufficientStorage

READ_LIMIT = 2000  # lines per read


PATH = "Workspace-relative file path."


class ReadArgs(ToolArgs):
    path: str = Field(description=PATH)
    offset: int = optional("First line to read (1-based).")
    limit: int = optional("Maximum number of lines.")


class WriteArgs(ToolArgs):
    path: str = Field(description=PATH)
    content: str = Field(description="The complete new file content.")


class EditArgs(ToolArgs):
    path: str = Field(description=PATH)
    old_text: str = Field(description="Exact text to replace; must match once.")
    new_text: str = Field(description="Replacement text.")


def file_ref(path: str) -> str:
    return "file:" + path.strip("/")


def _page(text: str, args: dict[str, Any], details: dict[str, Any]) -> ToolOutcome:
    """Lines `offset`.. of `text` (1-based), at most READ_LIMIT, with a note of what is left."""
    lines = text.splitlines()
    offset = max(int(args.get("offset", 1)), 1)
    limit = min(max(int(args.get("limit", READ_LIMIT)), 1), READ_LIMIT)
    chunk = lines[offset - 1 : offset - 1 + limit]
    more = len(lines) - (offset - 1 + len(chunk))
    body = "\n".join(chunk)
    if more > 0:
        body += f"\n\n[{more} more lines; continue with offset={offset + len(chunk)}]"
    return ToolOutcome(content=body, details={**details, "lines": len(chunk)})


async def _skill_read(skills: AgentFilesHost, args: dict[str, Any]) -> ToolOutcome:
    found = skill_files.find(sandbox_skills_dir(), args["path"], skills.skills, skills.active_skill_names())
    if isinstance(found, str):
        return ToolOutcome(content=found, is_error=True)
    name, path = found
    data = await asyncio.to_thread(path.read_bytes)
    rel = path.relative_to(sandbox_skills_dir().resolve() / name).as_posix()
    return _page(data.decode("utf-8", errors="replace"), args,
                 {"path": args["path"], "skill": name, "skillPath": f"{skill_files.PREFIX}{name}/{rel}"})


def _seen(agent: AgentFilesHost | None, rel: str, data: bytes) -> dict[str, Any]:
    """The agent saw this content of `rel` (services/runtime/store/file_reads.py); the details that record it."""
    path = canonical(rel)
    if agent is None or path is None:
        return {}
    sha = sha256(data)
    agent.file_reads.saw(path, sha)
    return {"sha256": sha}


async def _refused(host: WorkspaceHost, agent: AgentFilesHost | None, rel: str, current: bytes | None = None,
                   ) -> str | None:
    """Why a write or an edit of `rel` may not go on: a skill's file, or a file changed since the agent
    last saw it (`current`: its bytes when the caller read them already)."""
    if agent is None:
        return None
    path = canonical(rel)
    refused = skill_files.refusal(rel, agent.skills)
    if refused is not None or path is None:
        return refused
    now = sha256(current) if current is not None else await asyncio.to_thread(current_sha, host.paths.workspace, path)
    return agent.file_reads.refusal(path, now)


def read_tool(host: WorkspaceHost, agent: AgentFilesHost | None = None) -> Tool:
    """`agent`: the session's catalog and active skills, whose files `read` opens too, and the record
    of what the agent saw (None: a subagent's read, the workspace only, not the agent's)."""

    async def execute(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        if agent is not None and skill_files.named(args["path"], agent.skills) is not None:
            return await _skill_read(agent, args)
        if await is_image(host, args["path"]):
            return await image_outcome(host, args["path"])
        try:
            # Opened beneath the workspace: a link a command planted cannot lead the read out of it.
            data = await asyncio.to_thread(workspace_fs.read_bytes, host.paths.workspace, args["path"])
        except DiskError as exc:
            if exc.status == 404 and agent is not None:
                found = await _skill_read(agent, args)
                if not found.is_error:
                    return found
            return ToolOutcome(content=_missing(args["path"], exc), is_error=True)
        return _page(data.decode("utf-8", errors="replace"), args, {"path": args["path"], **_seen(agent, args["path"], data)})

    return Tool.typed(
        name="read",
        description="Read a file from the session workspace. Paths are relative to the workspace; "
        "skills/NAME/PATH reads a skill's own file (read-only), as does a path no workspace file has that an "
        "active skill has. "
        "Use offset/limit (1-based lines) for long text files. An image (PNG, JPEG, GIF, WebP) is returned "
        "as the image itself, so you can look at it (e.g. a rendered card).",
        arguments=ReadArgs,
        execute=execute,
    )


def _missing(rel: str, exc: DiskError) -> str:
    return f"No such file: {rel}" if exc.status == 404 else str(exc)


async def write_file(host: WorkspaceHost, rel: str, data: bytes) -> str:
    split_workspace_path(rel, for_write=True)  # a bad name is refused before the lease check
    check_size(data, host.max_file_bytes)
    if (why := await host.over_user_budget(len(data), "this write")) is not None:
        raise InsufficientStorage(why)  # 507, nothing written (shared/costs/user_disk.py)
    # Beneath the workspace, atomic, within the session's quota (507 otherwise; nothing written); in
    # the I/O pool, as the quota check walks the workspace (shared/storage/walk.py).
    ref = file_ref(await host.guarded_write(
        lambda: workspace_fs.write_bytes(host.paths.workspace, rel, data, quota=host.workspace_quota)))
    await host.artifact_changed(ref, "file", content=data)
    return ref


def write_tool(host: WorkspaceHost, agent: AgentFilesHost | None = None) -> Tool:
    async def execute(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        if (refused := await _refused(host, agent, args["path"])) is not None:
            return ToolOutcome(content=refused, is_error=True)
        data = args["content"].encode()
        try:
            ref = await write_file(host, args["path"], data)
        except DiskError as exc:
            return ToolOutcome(content=str(exc), is_error=True)
        return ToolOutcome(content=f"Wrote {len(data)} bytes to {args['path']}.",
                           details={"path": args["path"], "ref": ref, "bytes": len(data),
                                    **_seen(agent, args["path"], data)})

    return Tool.typed(
        name="write",
        description="Create or overwrite a file in the session workspace with the given content. Overwriting "
        "a file you have not read since it last changed is refused.",
        arguments=WriteArgs,
        execute=execute,
    )


def edit_tool(host: WorkspaceHost, agent: AgentFilesHost | None = None) -> Tool:
    async def execute(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        if agent is not None and (refused := skill_files.refusal(args["path"], agent.skills)) is not None:
            return ToolOutcome(content=refused, is_error=True)
        try:
            data = await asyncio.to_thread(workspace_fs.read_bytes, host.paths.workspace, args["path"])
            text = data.decode("utf-8", errors="replace")
        except DiskError as exc:
            return ToolOutcome(content=_missing(args["path"], exc), is_error=True)
        if (refused := await _refused(host, agent, args["path"], data)) is not None:
            return ToolOutcome(content=refused, is_error=True)
        old, new = args["old_text"], args["new_text"]
        if not old:
            return ToolOutcome(content="old_text must not be empty.", is_error=True)
        count = text.count(old)
        if count == 0:
            return ToolOutcome(content=f"old_text was not found in {args['path']}; read the file and copy the "
                               "exact text, including whitespace.", is_error=True)
        if count > 1:
            return ToolOutcome(content=f"old_text matches {count} places in {args['path']}; include more "
                               "surrounding text so it matches exactly once.", is_error=True)
        edited = text.replace(old, new, 1).encode()
        try:
            ref = await write_file(host, args["path"], edited)
        except DiskError as exc:
            return ToolOutcome(content=str(exc), is_error=True)
        return ToolOutcome(content=f"Edited {args['path']}.",
                           details={"path": args["path"], "ref": ref, **_seen(agent, args["path"], edited)})

    return Tool.typed(
        name="edit",
        description="Replace one exact, unique occurrence of old_text with new_text in a workspace file you "
        "have read since it last changed.",
        arguments=EditArgs,
        execute=execute,
    )
