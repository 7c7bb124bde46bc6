"""`make bench-compaction`: tokens before and after compaction over scripted sessions, and the time the
runtime is blocked per compaction (the model call excluded).

Each scripted session (tests/support/compaction_sessions.py: a deck built section by section, with
skill loads, todo updates, reads and writes) is written as a transcript and compacted with the real
code of both sides, in one process, with Pi's defaults (keep 20,000 recent tokens, reserve 16,384):

- runtime, request: `make_request` on the loaded transcript (cut point, previous summary, details);
- compaction service: read + parse the transcript, the summary span, serialization, file tracking
  (CPU of the service, not the runtime's), then the scripted summarizer behind the real openai client
  (the model call: reported, excluded from "blocked");
- runtime, apply: `check_ready`, the compaction entry plus restored anchors (todo, the workflow skill
  and its two required references) appended with fsync by `services.runtime.store.transcript.Transcript`,
  the context rebuilt, and its tokens counted (the `applied` event).

blocked = request + apply (most of apply is the fsync of the append). The lease check before the
append (one Redis GET) is not included.
Token counts use the runtime's counter (tiktoken, cl100k offline). Medians over `--repeat` runs.
Writes bench/results/compaction.json and prints a table. Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripted.factory import model_factory  # noqa: E402
from services.compaction.serialize import serialize_entries  # noqa: E402
from services.compaction.summarizer import Summarizer  # noqa: E402
from services.runtime.runs import compaction_trigger as c  # noqa: E402
from services.runtime.skillset.skills import load_skills  # noqa: E402
from services.runtime.store.todo import render  # noqa: E402
from services.runtime.store.transcript import Transcript  # noqa: E402
from services.runtime.turns.turn_order import active_skill_message  # noqa: E402
from shared.contracts.records.messages import CustomMessage  # noqa: E402
from shared.contracts.records.todo import TodoList  # noqa: E402
from shared.contracts.records.transcript import parse_entries  # noqa: E402
from shared.contracts.streams.inbox import CompactionReady  # noqa: E402
from shared.history import summary_rules as rules  # noqa: E402
from shared.history import tokens as token_rules  # noqa: E402
from shared.settings import Settings  # noqa: E402
from shared.storage.disk import append_jsonl, iter_jsonl  # noqa: E402
from tests.support.compaction_sessions import SessionBuilder, deck_session, todo_items  # noqa: E402

KEEP, RESERVE = 20_000, 16_384
SESSIONS: list[tuple[str, int, int, int]] = [  # name, sections, words per research read, sections after
    ("threshold: 37 sections, short reads", 37, 300, 0),
    ("threshold: 15 sections, long reads", 15, 900, 0),
    ("threshold: 64 small steps", 64, 80, 0),
    ("overflow: 48 sections (past the window)", 48, 300, 0),
    ("2nd compaction: 37 sections + 30", 37, 300, 30),
]


@dataclass
class Row:
    session: str
    entries: int
    tokens_before: int
    tokens_after: int
    summarized_entries: int
    request_ms: float
    apply_ms: float
    blocked_ms: float
    service_cpu_ms: float
    model_ms: float
    summary_chars: int


async def _guard() -> None:
    return None


@functools.lru_cache(maxsize=1)
def skills() -> dict[str, Any]:
    return dict(load_skills(ROOT / "skills"))  # the runtime loads its catalog once, at start


def anchors() -> list[CustomMessage]:
    """What `TurnBuilder.anchors()` builds from the todo and the activation entries."""
    todo = TodoList.model_validate({"revision": 7, "items": todo_items(3, 6)})
    out = [CustomMessage(custom_type="gamma.todo_anchor", content=render(todo), details={"trusted": True})]
    out.append(active_skill_message(skills()["deck-generation"], None))
    out += [active_skill_message(skills()[n], "deck-generation") for n in ("gml-authoring", "gml-cli")]
    return out


async def compact_once(path: Path, summarizer: Summarizer, sid: str) -> dict[str, Any]:
    transcript = Transcript.load(path, _guard)
    context = transcript.context()
    tokens = token_rules.context_tokens(context)  # the runtime counts every request anyway: the cache is warm

    t0 = time.perf_counter()
    request = c.make_request(sid, transcript.entries, keep_recent_tokens=KEEP, reserve_tokens=RESERVE,
                             tokens_before=tokens)
    request_s = time.perf_counter() - t0
    assert request is not None, "nothing to compact"

    t0 = time.perf_counter()
    entries = parse_entries(list(iter_jsonl(path)))
    span = rules.summary_span(entries, request.first_kept_entry_id, request.upto_entry_id)
    serialize_entries([*span.history, *span.turn_prefix])
    previous = request.previous_summary
    details = rules.file_operations([*span.history, *span.turn_prefix], request.previous_details)
    service_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    summary = await summarizer.summarize(span, previous_summary=previous, custom_instructions=None,
                                         reserve_tokens=RESERVE)
    model_s = time.perf_counter() - t0
    ready = CompactionReady(session_id=sid, request_id=request.request_id, first_kept_entry_id=request.first_kept_entry_id,
                            upto_entry_id=request.upto_entry_id, tokens_before=request.tokens_before,
                            summary=summary + rules.format_file_operations(details), details=details)

    t0 = time.perf_counter()
    assert c.check_ready(ready, transcript.entries) == "apply"
    await transcript.append_compaction(ready.summary, ready.first_kept_entry_id, ready.tokens_before,
                                       ready.details, ready.request_id, anchors())
    after = transcript.context()
    tokens_after = token_rules.context_tokens(after)
    apply_s = time.perf_counter() - t0
    return {
        "entries": len(entries), "tokens_before": tokens, "tokens_after": tokens_after,
        "summarized": len(span.history) + len(span.turn_prefix), "request_s": request_s, "apply_s": apply_s,
        "service_s": service_s, "model_s": model_s, "summary_chars": len(ready.summary),
    }


async def bench_session(name: str, sections: int, words: int, extra: int, repeat: int, workdir: Path,
                        summarizer: Summarizer) -> Row:
    builder = deck_session(sections=sections, words=words)
    runs: list[dict[str, Any]] = []
    for i in range(repeat):
        sid = f"bench{i}"
        path = workdir / sid / "transcript.jsonl"
        shutil.rmtree(path.parent, ignore_errors=True)
        path.parent.mkdir(parents=True)
        _write(builder, path)
        result = await compact_once(path, summarizer, sid)
        if extra:  # the session goes on, then compacts again: an update of the first summary
            more = SessionBuilder(entries=parse_entries(list(iter_jsonl(path))))
            deck_session(sections=extra, words=words, builder=more)
            _write(more, path)
            result = await compact_once(path, summarizer, sid)
        runs.append(result)

    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in runs) * 1000, 2)

    last = runs[-1]
    return Row(
        session=name, entries=last["entries"], tokens_before=last["tokens_before"], tokens_after=last["tokens_after"],
        summarized_entries=last["summarized"], request_ms=med("request_s"), apply_ms=med("apply_s"),
        blocked_ms=round(statistics.median(r["request_s"] + r["apply_s"] for r in runs) * 1000, 2),
        service_cpu_ms=med("service_s"), model_ms=med("model_s"), summary_chars=last["summary_chars"],
    )


def _write(builder: SessionBuilder, path: Path) -> None:
    path.unlink(missing_ok=True)
    append_jsonl(path, [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in builder.entries])


def print_table(rows: list[Row]) -> None:
    head = ("session", "entries", "tokens before", "tokens after", "ratio", "blocked ms", "request ms",
            "apply ms", "service cpu ms", "model ms")
    print(" | ".join(head))
    print(" | ".join("-" * len(h) for h in head))
    for r in rows:
        print(" | ".join(str(x) for x in (
            r.session, r.entries, r.tokens_before, r.tokens_after, f"{r.tokens_after / r.tokens_before:.2f}",
            r.blocked_ms, r.request_ms, r.apply_ms, r.service_cpu_ms, r.model_ms)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "compaction.json")
    args = parser.parse_args()
    skills()
    summarizer = Summarizer(model_factory(Settings(OPENAI_API_KEY=None), "summarizer"), "gpt-5-mini")  # type: ignore[call-arg]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gamma-bench-compaction-") as tmp:
        for name, sections, words, extra in SESSIONS:
            rows.append(await bench_session(name, sections, words, extra, args.repeat, Path(tmp), summarizer))
    print_table(rows)
    result = {
        "benchmark": "compaction",
        "settings": {"keep_recent_tokens": KEEP, "reserve_tokens": RESERVE, "repeat": args.repeat,
                     "token_counter": "tiktoken " + token_rules.encoding_name()},
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "sessions": [asdict(r) for r in rows],
        "summary": {
            "median_blocked_ms": statistics.median(r.blocked_ms for r in rows),
            "max_blocked_ms": max(r.blocked_ms for r in rows),
            "median_tokens_after_ratio": round(statistics.median(r.tokens_after / r.tokens_before for r in rows), 3),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
