"""A transcript writer killed (SIGKILL, by itself at a chosen point or by the test at any time) in the
middle of its appends, compactions and leaf moves, for test_transcript_index_crash.py:
`python -m tests.integration.index_crash_child TRANSCRIPT WHERE SEED`.

WHERE: `torn_append` (half a batch's bytes written), `before_index` (a compaction's lines written, its
index not), `index_temp` (the index's temp file half written, not renamed), `before_reload` (a leaf
move to an older entry written, the branch not read back), `ids_temp` (the ids file's temp file half
written), `before_ids_index` (a new ids file renamed, the index that counts on it not written),
`anywhere` (the test kills it). The index keeps 24 ids, so the ids move to the ids file every few
compactions (shared/history/transcript_ids.py). It prints `ready` once it has loaded the transcript, then
works until killed."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

from services.runtime.store import transcript as transcript_module
from services.runtime.store.transcript import Transcript, read_entries
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.messages import CustomMessage, UserMessage
from shared.contracts.records.transcript import LeafEntry
from shared.history import transcript_ids as tid
from shared.history import transcript_index as ix


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(where: str, after: int) -> None:
    """Kill this process at `where`, the `after`-th time it is reached."""
    count = {"n": 0}

    def due() -> bool:
        count["n"] += 1
        return count["n"] >= after

    if where == "torn_append":
        real_append = transcript_module.append_lines_unsynced

        def torn(path: Path, lines: list[bytes]) -> Any:
            if due():
                with open(path, "ab") as fh:
                    payload = b"".join(line + b"\n" for line in lines)
                    fh.write(payload[: len(payload) // 2])
                die()
            return real_append(path, lines)
        transcript_module.append_lines_unsynced = torn  # type: ignore[assignment]
    elif where == "before_index":
        real_write = ix.write_index

        def no_index(path: Path, index: ix.TranscriptIndex) -> None:
            if due():
                die()
            real_write(path, index)
        ix.write_index = no_index  # type: ignore[assignment]
    elif where == "index_temp":
        real_atomic = ix.atomic_write_bytes

        def half(path: Path, data: bytes) -> None:
            if due():
                (path.parent / f".{path.name}.crash.tmp").write_bytes(data[: len(data) // 2])
                die()
            real_atomic(path, data)
        ix.atomic_write_bytes = half  # type: ignore[assignment]
    elif where == "ids_temp":
        def half_ids(path: Path, chunks: Any) -> None:
            if due():
                (path.parent / f".{path.name}.crash.tmp").write_bytes(b"".join(chunks)[:100])
                die()
            real_ids(path, chunks)
        real_ids = tid._write
        tid._write = half_ids  # type: ignore[assignment]
    elif where == "before_ids_index":
        real_merge = tid.merge

        def merged(*args: Any, **kwargs: Any) -> None:
            real_merge(*args, **kwargs)
            if due():
                die()
        tid.merge = merged  # type: ignore[assignment]
    elif where == "before_reload":
        real_load = ix.load

        def no_reload(path: Path, fresh: bool = False) -> ix.Loaded:
            if fresh and due():
                die()
            return real_load(path, fresh)
        ix.load = no_reload  # type: ignore[assignment]


async def work(path: Path, rng: random.Random, where: str) -> None:
    t = Transcript.load(path, WriteGuard())  # its ids move to the ids file here (the index kept all of them)
    older = [e.id for e in read_entries(path) if not isinstance(e, LeafEntry)]
    if where != "anywhere":
        arm(where, rng.randint(1, 4))
    print("ready", flush=True)
    n = 0
    while True:
        n += 1
        await t.append_message(UserMessage(content=f"turn {n} " + "x" * rng.randint(10, 3000)), prompt_id=f"c{n}")
        await t.append_custom(CustomMessage(custom_type="gamma.injection", content="y",
                                            details={"source": "client", "sourceId": f"c{n}"}))
        if n % 3 == 0 and len(t.entries) > 4:
            await t.append_compaction(f"summary {n}", t.entries[-3].id, 10, {}, f"crash-{n}",
                                      [CustomMessage(custom_type="gamma.todo_anchor", content="todo")])
        if n % 4 == 0:
            nodes = [e.id for e in t.entries if not isinstance(e, LeafEntry)]
            target = rng.choice(older) if n % 8 == 0 else rng.choice(nodes)
            await t.move_leaf(target, "rewind", "<session_rewound>x</session_rewound>")


def main() -> None:
    path, where, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    tid.RECENT_MAX = 24
    asyncio.run(work(path, rng, where))


if __name__ == "__main__":
    main()
