"""What a wake reads from the session's disk before the session is built: the transcript's window and
index (shared/history/transcript_index.py: never the whole history), the todo list, the UI state, a
rewind a crash cut short and the workspace's file list, read together in one hand-off to the I/O
pool (worker.py `_open`). On a slow disk (a network filesystem) each read's metadata operations on
the event loop would hold every other session's turn (README "Reliability"); one hand-off, not one
per file (bench/README.md "bench-e2e", the I/O pool's jobs by call site). Read after
the lease and the dormant-write wait (worker.py): from then on only this holder writes these files."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from shared.history import rewind as rw
from shared.history.transcript_index import Loaded, load
from shared.storage.disk import SessionPaths, read_json, workspace_files


@dataclass(frozen=True)
class SessionFiles:
    transcript: Loaded  # the index, the window's entries and the lines appended after the index
    todo: Any  # todo.json as parsed, None when absent
    ui: Any  # state.json as parsed, None when absent (liveui.py builds the document from it at first use)
    intent: rw.Intent | None  # a rewind a crash cut short (rewind.py `finish_pending`)
    # The viewable-file projection's walk (tool_host.py `refresh_viewable`); None when a rewind is
    # pending, whose restore changes the files: the wake then walks after it.
    viewable: list[str] | None

    @classmethod
    def read(cls, paths: SessionPaths, max_depth: int = 64) -> SessionFiles:
        intent = rw.pending(paths)
        return cls(transcript=load(paths.transcript), todo=read_json(paths.todo), ui=read_json(paths.state),
                   intent=intent,
                   viewable=None if intent is not None else workspace_files(paths.workspace, max_depth=max_depth))


async def read_session_files(paths: SessionPaths, max_depth: int = 64) -> SessionFiles:
    return await asyncio.get_running_loop().run_in_executor(None, SessionFiles.read, paths, max_depth)
