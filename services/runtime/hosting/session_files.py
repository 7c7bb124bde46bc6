"""What a wake reads from the session's disk before the session is built: the transcript's window and
index (shared/history/transcript_index.py: never the whole history) and the todo list, read together in the I/O pool (worker.py `_open`). On a slow disk (a network
filesystem) each read's metadata operations on the event loop would hold every other session's turn
(README "Reliability"); the UI state is read at its first use, also in the pool (liveui.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from shared.history.transcript_index import Loaded, load
from shared.storage.disk import SessionPaths, read_json


@dataclass(frozen=True)
class SessionFiles:
    transcript: Loaded  # the index, the window's entries and the lines appended after the index
    todo: Any  # todo.json as parsed, None when absent

    @classmethod
    def read(cls, paths: SessionPaths) -> SessionFiles:
        return cls(transcript=load(paths.transcript), todo=read_json(paths.todo))


async def read_session_files(paths: SessionPaths) -> SessionFiles:
    return await asyncio.get_running_loop().run_in_executor(None, SessionFiles.read, paths)
