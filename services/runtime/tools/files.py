"""read / write / edit: inside the session workspace only; every change is an ArtifactChange(agent)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import Field

from shared import workspace_fs
from shared.disk import DiskError, check_size, split_workspace_path
from shared.tool_schema import ToolArgs, optional

from ..engine.types import Tool, ToolContext, ToolOutcome
from .image_view import image_outcome, is_image
from .ports import WorkspaceHost

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


def read_tool(host: WorkspaceHost) -> Tool:
    async def execute(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        if await is_image(host, args["path"]):
            return await image_outcome(host, args["path"])
        try:
            # Opened beneath the workspace: a link a command planted cannot lead the read out of it.
            data = await asyncio.to_thread(workspace_fs.read_bytes, host.paths.workspace, args["path"])
            text = data.decode("utf-8", errors="replace")
        except DiskError as exc:
            return ToolOutcome(content=_missing(args["path"], exc), is_error=True)
        lines = text.splitlines()
        offset = max(int(args.get("offset", 1)), 1)
        limit = min(max(int(args.get("limit", READ_LIMIT)), 1), READ_LIMIT)
        chunk = lines[offset - 1 : offset - 1 + limit]
        more = len(lines) - (offset - 1 + len(chunk))
        body = "\n".join(chunk)
        if more > 0:
            body += f"\n\n[{more} more lines; continue with offset={offset + len(chunk)}]"
        return ToolOutcome(content=body, details={"path": args["path"], "lines": len(chunk)})

    return Tool.typed(
        name="read",
        description="Read a file from the session workspace. Paths are relative to the workspace. "
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
    # Beneath the workspace, atomic, within the session's quota (507 otherwise; nothing written); in
    # the I/O pool, as the quota check walks the workspace (shared/walk.py).
    ref = file_ref(await host.guarded_write(
        lambda: workspace_fs.write_bytes(host.paths.workspace, rel, data, quota=host.workspace_quota)))
    await host.artifact_changed(ref, "file", content=data)
    return ref


def write_tool(host: WorkspaceHost) -> Tool:
    async def execute(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        data = args["content"].encode()
        try:
            ref = await write_file(host, args["path"], data)
        except DiskError as exc:
            return ToolOutcome(content=str(exc), is_error=True)
        return ToolOutcome(content=f"Wrote {len(data)} bytes to {args['path']}.",
                           details={"path": args["path"], "ref": ref, "bytes": len(data)})

    return Tool.typed(
        name="write",
        description="Create or overwrite a file in the session workspace with the given content.",
        arguments=WriteArgs,
        execute=execute,
    )


def edit_tool(host: WorkspaceHost) -> Tool:
    async def execute(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        try:
            data = await asyncio.to_thread(workspace_fs.read_bytes, host.paths.workspace, args["path"])
            text = data.decode("utf-8", errors="replace")
        except DiskError as exc:
            return ToolOutcome(content=_missing(args["path"], exc), is_error=True)
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
        try:
            ref = await write_file(host, args["path"], text.replace(old, new, 1).encode())
        except DiskError as exc:
            return ToolOutcome(content=str(exc), is_error=True)
        return ToolOutcome(content=f"Edited {args['path']}.", details={"path": args["path"], "ref": ref})

    return Tool.typed(
        name="edit",
        description="Replace one exact, unique occurrence of old_text with new_text in a workspace file.",
        arguments=EditArgs,
        execute=execute,
    )
