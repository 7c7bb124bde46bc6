"""Long transcripts written directly (bench/history.py, tests of the transcript index): valid entries
of every kind the wake folds, a compaction every `compaction_every` bytes (with its restored anchor),
and, with `branch_every`, a rewind (a leaf move to an entry a few turns back) that leaves an abandoned
branch behind. Lines are built from templates dumped by the contracts' own models, so every line
validates; only ids, parents, texts and times vary. Fast: 1 GB in tens of seconds on this disk.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from shared.contracts.records.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.contracts.records.transcript import (
    CompactionEntry,
    CustomMessageEntry,
    LeafEntry,
    MessageEntry,
    SessionHeader,
    SkillActivationEntry,
    SkillEndEntry,
)

STAMP = "2026-01-01T00:00:00.000Z"


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)  # type: ignore[no-any-return]


_USER = _dump(MessageEntry(id="x", timestamp=STAMP, message=UserMessage(content="", timestamp=1), prompt_id="p"))
_CALL = _dump(MessageEntry(id="x", timestamp=STAMP, message=AssistantMessage(
    content=[TextContent(text=""), ToolCall(id="c", name="bash", arguments={"command": "ls"})],
    stop_reason="toolUse", model="scripted", timestamp=1)))
_RESULT = _dump(MessageEntry(id="x", timestamp=STAMP, message=ToolResultMessage(
    tool_call_id="c", tool_name="bash", content=[TextContent(text="")], timestamp=1)))
_ANSWER = _dump(MessageEntry(id="x", timestamp=STAMP, message=AssistantMessage(
    content=[TextContent(text="")], model="scripted", timestamp=1)))
_INJECTION = _dump(CustomMessageEntry(id="x", timestamp=STAMP, custom_type="gamma.injection", content="",
                                      details={"source": "artifact", "sourceId": "s", "injectionType": "artifact_update",
                                               "ref": "deck:1", "toRevision": 1}))
_ANCHOR = _dump(CustomMessageEntry(id="x", timestamp=STAMP, custom_type="gamma.todo_anchor", content="todo",
                                   details={"trusted": True}))


@dataclass
class History:
    """What was written: the file's length, its lines, compactions and rewinds, and a few ids."""

    path: Path
    bytes: int = 0
    lines: int = 0
    compactions: int = 0
    rewinds: int = 0
    leaf: str | None = None
    ids: list[str] = field(default_factory=list)  # every node id, file order


class _Writer:
    def __init__(self, h: History, fh: Any, rng: random.Random, payload: int) -> None:
        self.h, self.fh, self.rng, self.payload = h, fh, rng, payload
        self.branch: list[str] = []  # the active branch's node ids (the recent part is what rewinds need)
        self.filler = "".join(rng.choice("abcdefghij klmnop\n") for _ in range(payload))

    def put(self, d: dict[str, Any], node: bool = True) -> str:
        eid = f"{self.h.lines:08x}"[-8:] if self.h.lines < 1 << 32 else f"{self.h.lines:012x}"
        d["id"] = eid
        if node:
            d["parentId"] = self.h.leaf
        line = orjson.dumps(d) + b"\n"
        self.fh.write(line)
        self.h.bytes += len(line)
        self.h.lines += 1
        if node:
            self.h.leaf = eid
            self.h.ids.append(eid)
            self.branch.append(eid)
            del self.branch[:-256]
        return eid

    def message(self, template: dict[str, Any], text: str, entry: dict[str, Any] | None = None, **extra: Any) -> str:
        d = {**template, **(entry or {}), "message": {**template["message"], **extra}}
        content = d["message"]["content"]
        if isinstance(content, str):
            d["message"]["content"] = text
        else:
            d["message"]["content"] = [{**content[0], "text": text}, *content[1:]]
        return self.put(d)

    def turn(self, n: int) -> None:
        self.message(_USER, f"prompt {n}: " + self.filler[: self.payload // 8], {"promptId": f"prompt-{n}"})
        call = f"call{n}"
        self.message(_CALL, "looking", content=[{"type": "text", "text": "looking"},
                                                {"type": "toolCall", "id": call, "name": "bash",
                                                 "arguments": {"command": f"ls {n}"}}])
        self.message(_RESULT, self.filler, toolCallId=call)
        if n % 7 == 0:
            self.put({**_INJECTION, "details": {**_INJECTION["details"], "sourceId": f"s{n}", "toRevision": n}})
        if n % 11 == 0:
            self.put(_dump(SkillActivationEntry(id="x", timestamp=STAMP, name=f"skill{n % 3}", skill_type="reference",
                                                required_by=None)))
        if n % 13 == 0:
            self.put(_dump(SkillEndEntry(id="x", timestamp=STAMP, name=f"skill{(n + 1) % 3}", reason="completed")))
        self.message(_ANSWER, f"done {n}")

    def compaction(self, n: int) -> None:
        kept = self.branch[-4] if len(self.branch) >= 4 else self.branch[0]
        self.put(_dump(CompactionEntry(id="x", timestamp=STAMP, summary=f"summary {n}", first_kept_entry_id=kept,
                                       tokens_before=1000, details={}, request_id=f"req{n}")))
        self.put(dict(_ANCHOR))
        self.h.compactions += 1

    def rewind(self) -> None:
        back = self.rng.randint(2, min(20, len(self.branch) - 1))
        target = self.branch[-back]
        self.put(_dump(LeafEntry(id="x", timestamp=STAMP, target_id=target, from_id=self.h.leaf, reason="rewind",
                                 note="<session_rewound>back</session_rewound>")), node=False)
        self.h.leaf = target
        del self.branch[-back + 1:]
        self.h.rewinds += 1


def write_history(path: Path, size: int, *, compaction_every: int = 200_000, branch_every: int = 0,
                  payload: int = 1500, seed: int = 0) -> History:
    """Append to `path` until it holds at least `size` bytes (a new file starts with its header)."""
    h = History(path)
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb", buffering=1 << 20) as fh:
        w = _Writer(h, fh, rng, payload)
        w.put(_dump(SessionHeader(id="x", timestamp=STAMP)))
        n, next_compaction, next_branch = 0, compaction_every, branch_every or size + 1
        while h.bytes < size:
            n += 1
            w.turn(n)
            if h.bytes >= next_compaction:
                w.compaction(n)
                next_compaction = h.bytes + compaction_every
            if h.bytes >= next_branch and len(w.branch) > 4:
                w.rewind()
                next_branch = h.bytes + branch_every
    return h
