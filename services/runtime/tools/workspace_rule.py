"""read_workspace_rule({knowledgeId}): a workspace knowledge note's body (services/runtime/turns/knowledge.py).
A body past the inline limit goes to the workspace file `knowledge/{id}.md`; the result names it."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import Field

from services.runtime.engine.types import Tool, ToolContext, ToolOutcome
from services.runtime.tools.files import write_file
from services.runtime.tools.ports import WorkspaceHost
from shared.history.knowledge import KnowledgeNote
from shared.mcp.tool_schema import ToolArgs
from shared.storage.disk import DiskError
from shared.trust.trusted_blocks import AttrValue, lines, quoted, render

TOOL_NAME = "read_workspace_rule"


class NoteReader(Protocol):
    async def note(self, note_id: str) -> KnowledgeNote | None: ...


class WorkspaceRuleArgs(ToolArgs):
    knowledge_id: str = Field(alias="knowledgeId", description="The note id from the knowledge hints.")

def read_workspace_rule_tool(host: WorkspaceHost, reader: NoteReader | None, inline_max: int) -> Tool:
    async def execute(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        note_id = str(args["knowledgeId"])
        note = await reader.note(note_id) if reader is not None else None
        if note is None:
            return ToolOutcome(content=f"No workspace knowledge note {note_id!r}: use an id from the knowledge hints.",
                               is_error=True)
        details: dict[str, Any] = {"knowledgeId": note.id, "revision": note.revision, "name": note.name,
                                   "scope": note.scope, "source": note.source}
        # Name, scope and body are the note author's text: attributes and a quotation, never the harness's words.
        attrs: dict[str, AttrValue] = {"id": note.id, "source": note.source, "revision": note.revision, "name": note.name, "scope": note.scope}
        if len(note.body) <= inline_max:
            body = lines("The note's body, as its author wrote it:", quoted(note.source, note.body))
            return ToolOutcome(content=render("workspace_rule", attrs, body), details=details)
        path = f"knowledge/{note.id}.md"
        try:
            await write_file(host, path, note.body.encode())
        except DiskError as exc:
            return ToolOutcome(content=f"The note is too long to return inline and could not be written to "
                               f"{path}: {exc}", is_error=True)
        details["path"] = path
        return ToolOutcome(content=render("workspace_rule", attrs, f"The body is long ({len(note.body)} characters): "
                                          f"it is in the workspace file {path}. Read the parts you need with the "
                                          "read tool."), details=details)

    return Tool.typed(
        name=TOOL_NAME,
        description="Read a workspace knowledge note named in the knowledge hints: returns its complete body "
        "(or, for a long note, the workspace file that holds it). Fetch every matching unread note in one "
        "tool batch, in parallel, before your first task action.",
        arguments=WorkspaceRuleArgs,
        execute=execute,
    )
