"""`make bench-history`: a wake costs the same at 1 GB of history as at none (docs/architecture.md "How a
session wakes").

The runtime's Worker in this process (bench/prefix.py's Harness: real Redis of its own, the scripted
model behind the real openai client). Dormant sessions whose `transcript.jsonl` is generated as the
bench runs (scripted/history.py: valid entries, a compaction every ~200 KB), 0 / 10 MB / 100 MB / 1 GB
(`--sizes`). Per size, side by side with the empty session:

- the first wake of the session written before the index existed (it rebuilds the index: one scan);
- `--rounds` wakes, each followed by a prompt: Wake -> SessionLive, prompt -> first token (the first
  streamed event of the answer), Wake -> first token (p50 / p99);
- memory the live session holds: the Python heap allocated by a wake and a turn and still held while
  the session is live (tracemalloc), and this process's RSS with the session live;
- the same wakes while other sessions stream paced answers (80 tokens/s) on the worker, first
  `--light-neighbours` (20: a loop that is not saturated, where the wake's own effect shows), then
  `--neighbours` (100: the issue's figure; the 2-core worker is saturated, its lag p99 mostly that):
  the none and largest sessions' rounds alternated (ABBA: the neighbours' load grows as their answers
  lengthen their contexts, so the session measured second would get more), the event loop's lag (a
  5-ms sleep's overshoot: what every neighbour's next token waits for) filed under the session whose
  wake (close, Wake -> SessionLive) or turn (prompt -> answer) ran then, and the wake's own figures;
  then a wake of the largest with its index deleted (one scan of the whole file: a session written
  before the index, or a crash's), its loop lag beside the neighbours;
- at the largest size: a rewind to an entry in the window, an edit-and-branch, and a rewind to an entry
  a full scan finds (refused 409: generated history has no snapshots; the time is the scan's); then, the
  session dormant, as the proxy runs them in its I/O pool: the branch view's first page (`GET
  /transcript`), a fork of the leaf (the whole branch copied) and an export (limit raised to 4 GiB).

Prints a table, writes bench/results/history.json (`--out`). Run under `flock /tmp/gamma-bench.lock`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from loop_lag import LagProbe, dist, lag_during, phase  # noqa: E402
from prefix import Harness, done, redis_url, script  # noqa: E402

from scripted.gamma import ScriptedGamma  # noqa: E402
from scripted.history import write_history  # noqa: E402
from scripted.pacing import Timing  # noqa: E402
from scripted.transport import scripted_client  # noqa: E402
from services.proxy.dormant.export import build as export  # noqa: E402
from services.proxy.dormant.transcript_pages import view_and_page  # noqa: E402
from services.runtime.app import skills_dir  # noqa: E402
from services.runtime.skillset.skills import load_skills  # noqa: E402
from shared.contracts.records.transcript import MessageEntry  # noqa: E402
from shared.contracts.streams.inbox import Barrier, UserPrompt  # noqa: E402
from shared.contracts.streams.lifecycle import SessionLive  # noqa: E402
from shared.contracts.streams.wake import Wake  # noqa: E402
from shared.history import fork  # noqa: E402
from shared.history import rewind as rw  # noqa: E402
from shared.history import transcript_ids as tid  # noqa: E402
from shared.history import transcript_index as ix  # noqa: E402
from shared.redis import keys  # noqa: E402
from shared.serving.gcpolicy import heap_freezer, young_threshold  # noqa: E402
from shared.serving.service import settle_heap  # noqa: E402
from shared.storage.disk import session_paths  # noqa: E402
from shared.storage.snapshots import SnapshotLimits  # noqa: E402
from shared.streams import inbox  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "history.json"
SIZES = {"empty": 0, "10MB": 10 << 20, "100MB": 100 << 20, "1GB": 1 << 30}
FIRST = {"message_update", "tool_call_progress", "message_start"}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class Bench:
    def __init__(self, h: Harness, data_dir: Path, url: str, sessions: int) -> None:
        self.h, self.data_dir = h, data_dir
        # The client's reads of each session's events block (XREAD): a pool of their own, sized for every
        # session, so the worker's pool (100 connections by default) is never emptied by the bench's reads.
        self.reader = aioredis.from_url(url, max_connections=2 * sessions + 16)
        self.live_at: list[float] = []
        h.on_publish.append(lambda m: isinstance(m, SessionLive) and self.live_at.append(time.perf_counter()))

    async def wake(self, sid: str) -> tuple[float, float]:
        """(Wake -> SessionLive, the wake's start); the barrier follows, as the proxy's wake sends it."""
        wake = Wake(session_id=sid)
        start = time.perf_counter()
        await self.h.worker.on_wake(wake)
        live = self.live_at[-1] - start
        await inbox.append(self.h.client, Barrier(session_id=sid, wake_id=wake.wake_id))
        return live, start

    async def prompt(self, sid: str, text: str, limit_s: float = 60) -> tuple[float, float]:
        """(prompt -> first streamed event, prompt -> the answer that blocks on the user), absolute ends."""
        r = self.reader
        last = (await r.xrevrange(keys.events(sid), count=1) or [(b"0-0", None)])[0][0]
        start = time.perf_counter()
        await inbox.append(r, UserPrompt(session_id=sid, message=text))
        first = None
        deadline = start + limit_s
        while time.perf_counter() < deadline:
            got = await r.xread({keys.events(sid): last}, block=1000, count=100)
            for _, entries in got or []:
                for entry_id, fields in entries:
                    last = entry_id
                    ev = json.loads(fields[b"data"])
                    if first is None and ev["type"] in FIRST:
                        first = time.perf_counter()
                    if ev["type"] == "message_user" and ev["data"].get("block_on_user"):
                        answered = time.perf_counter()
                        task = self.h.worker.sessions[sid].state.run_task
                        if task is not None:
                            await asyncio.wait({task})  # the run's bookkeeping is done before the next close
                        return first or answered, answered
        raise TimeoutError(f"{sid}: no answer")

    async def round(self, sid: str, i: int, probe: LagProbe | None = None, label: str = "") -> dict[str, float]:
        """One close, wake and prompt; the probe files the loop's lag under `label:wake` then `label:turn`."""
        with phase(probe, f"{label}:wake"):
            await self.h.worker.close(sid, "bench")
            live, start = await self.wake(sid)
        with phase(probe, f"{label}:turn"):
            sent = time.perf_counter()
            first, answer = await self.prompt(sid, script(done(f"round {i} answered")))
        return {"wake_to_live_ms": live, "prompt_to_first_token_ms": first - sent,
                "wake_to_first_token_ms": first - start, "prompt_to_answer_ms": answer - sent}

    async def rounds(self, sid: str, n: int) -> dict[str, Any]:
        return summary([await self.round(sid, i) for i in range(n)])

    async def held_memory(self, sid: str) -> dict[str, float]:
        """The heap a wake and a turn allocate and the live session still holds, and RSS while live."""
        await self.h.worker.close(sid, "bench")
        gc.collect()
        tracemalloc.start()
        await self.wake(sid)
        await self.prompt(sid, script(done("memory")))
        await asyncio.sleep(0.2)
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return {"held_mb": round(held / 2**20, 2), "peak_mb": round(peak / 2**20, 2), "rss_live_mb": rss_mb()}


def summary(rounds: list[dict[str, float]]) -> dict[str, Any]:
    return {key: dist([r[key] for r in rounds]) for key in
            ("wake_to_live_ms", "prompt_to_first_token_ms", "wake_to_first_token_ms", "prompt_to_answer_ms")}


async def interleaved(b: Bench, labels: list[str], n: int) -> dict[str, Any]:
    """`n` rounds of each session, alternating (ABBA...): the neighbours' own load grows as their answers
    lengthen their contexts, so rounds run one session after the other would hand the later one more."""
    probe, stop = LagProbe(), asyncio.Event()
    task = asyncio.ensure_future(probe.run(stop))
    rounds: dict[str, list[dict[str, float]]] = {label: [] for label in labels}
    try:
        for label in labels:
            await b.wake(f"history-{label.lower()}")
        for i in range(n):
            for label in labels if i % 2 == 0 else labels[::-1]:
                rounds[label].append(await b.round(f"history-{label.lower()}", i, probe, label))
    finally:
        stop.set()
        await task
    return {label: {**summary(rounds[label]), "neighbour_loop_lag_ms": probe.of(f"{label}:wake", f"{label}:turn"),
                    "neighbour_loop_lag_wake_ms": probe.of(f"{label}:wake"),
                    "neighbour_loop_lag_turn_ms": probe.of(f"{label}:turn")} for label in labels}


async def rebuild_wake(b: Bench, label: str) -> dict[str, Any]:
    """A wake with the index gone (a session written before it, or one a crash left stale): one scan of
    the whole file (docs/architecture.md "How a session wakes", crash rules), beside the neighbours."""
    sid = f"history-{label.lower()}"
    await b.h.worker.close(sid, "bench")
    ix.index_path(session_paths(b.data_dir, sid).transcript).unlink(missing_ok=True)
    (live, _), lag = await lag_during(b.wake(sid))
    return {"wake_to_live_ms": round(live * 1000, 1), "neighbour_loop_lag_ms": lag}


async def neighbours(b: Bench, n: int, first: int = 0) -> list[asyncio.Task[Any]]:
    """`n` live sessions, each streaming a long paced answer (restarted while the bench measures)."""
    text = "token " * 1500

    async def stream(sid: str) -> None:
        await b.wake(sid)
        while True:
            await b.prompt(sid, script(done(text)), limit_s=600)

    return [asyncio.ensure_future(stream(f"neighbour{i:03d}")) for i in range(first, first + n)]


async def rewinds(b: Bench, sid: str) -> dict[str, Any]:
    """A rewind in the window, an edit-and-branch, and a rewind that reads the whole branch by offset."""
    session = b.h.worker.sessions[sid]
    t = session.transcript
    users = [e for e in t.entries if isinstance(e, MessageEntry) and e.message.role == "user"]
    out: dict[str, Any] = {}

    async def timed(key: str, target: str, reason: Any, edited: str | None = None) -> None:
        start = time.perf_counter()
        try:
            await session.rewinder.rewind(target, reason, edited)
            out[key + "_outcome"] = "done"
        except rw.RewindRefused as exc:
            out[key + "_outcome"] = f"{exc.status}: {exc.message[:80]}"
        out[key + "_ms"] = round((time.perf_counter() - start) * 1000, 1)

    await timed("rewind_in_window", users[-1].id, "rewind")
    await b.prompt(sid, script(done("after rewind")))
    users = [e for e in t.entries if isinstance(e, MessageEntry) and e.message.role == "user"]
    await timed("edit_and_branch", users[-1].parent_id or users[-1].id, "edit", users[-1].id)
    start = time.perf_counter()
    try:
        await session.rewinder.rewind("00000100", "rewind")  # generated early in the history
        out["rewind_old_outcome"] = "rewound"
    except rw.RewindRefused as exc:
        out["rewind_old_outcome"] = f"{exc.status}: no snapshot kept (generated history)"
    out["rewind_old_scan_ms"] = round((time.perf_counter() - start) * 1000, 1)
    return out


def dormant_ops(data_dir: Path, sid: str) -> dict[str, Any]:
    """The branch view's first page, a fork of the leaf and an export of the dormant session (blocking)."""
    src, out = session_paths(data_dir, sid), {}

    def timed(key: str, op: Any) -> None:
        start = time.perf_counter()
        try:
            out[key + "_outcome"] = op()
        except Exception as exc:  # noqa: BLE001 - recorded: the next operation still runs
            out[key + "_outcome"] = f"{type(exc).__name__}: {str(exc)[:80]}"
        out[key + "_ms"] = round((time.perf_counter() - start) * 1000, 1)

    def view() -> str:
        _, page = view_and_page(src.transcript, 0, 200, 1 << 20, tree=False)
        return f"{len(page.entries)} entries"

    def fork_leaf() -> str:
        limits, dst = SnapshotLimits(), session_paths(data_dir, f"{sid}-fork")
        fork.lay_out(fork.plan(src, limits, None, dormant=True), dst, limits, {})
        size = dst.transcript.stat().st_size
        shutil.rmtree(dst.root)
        return f"{size} bytes of branch copied"

    def export_all() -> str:
        with export(src.root, sid, b"{}", 4 << 30, data_dir / "spool") as f:
            return f"{f.seek(0, 2)} bytes (tar.gz)"

    timed("branch_view", view)
    timed("fork", fork_leaf)
    timed("export", export_all)
    return out


async def measure_size(b: Bench, label: str, size: int, args: argparse.Namespace) -> dict[str, Any]:
    sid = f"history-{label.lower()}"
    row: dict[str, Any] = {"size": label}
    if size:
        start = time.perf_counter()
        h = write_history(session_paths(b.data_dir, sid).transcript, size, compaction_every=200_000)
        row |= {"generate_s": round(time.perf_counter() - start, 1), "bytes": h.bytes, "lines": h.lines,
                "compactions": h.compactions}
    try:
        live, _ = await b.wake(sid)  # written before the index: the first wake builds it
    except Exception as exc:  # noqa: BLE001 - recorded: the sizes measured before it are kept
        row["first_wake_error"] = repr(exc)[:200]
        return row
    row["first_wake_ms"] = round(live * 1000, 1)
    await b.prompt(sid, script(done("first")))
    index = ix.index_path(session_paths(b.data_dir, sid).transcript)
    row["index_bytes"] = index.stat().st_size if index.exists() else 0
    ids = tid.ids_path(session_paths(b.data_dir, sid).transcript)
    row["ids_bytes"] = ids.stat().st_size if ids.exists() else 0
    row["window_entries"] = len(b.h.worker.sessions[sid].transcript.entries)
    row |= await b.rounds(sid, args.rounds)
    row["memory"] = await b.held_memory(sid)
    await b.h.worker.close(sid, "bench")
    return row


def gc_as_the_service(h: Harness) -> asyncio.Task[None]:
    """The runtime service's GC policy (shared/serving/service.py, gcpolicy.py): startup's heap frozen,
    its young threshold, the freezer's passes. Without it every full collection scanned the whole heap
    (120-220 ms of loop held, settle_heap's docstring), and a tree whose first 1 GB wake scanned in
    this process froze the heap there as a side effect (transcript_scan.py `FREEZE_EVERY`): two trees
    measured under different collectors."""
    server = h.settings.server
    settle_heap()
    young_threshold(server.gc_gen0)
    return asyncio.ensure_future(heap_freezer(server.gc_freeze_s, server.gc_full_s, server.gc_full_growth,
                                              server.gc_full_released, server.gc_full_defer_s, server.gc_malloc_trim))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    skills = load_skills(skills_dir())
    with tempfile.TemporaryDirectory(prefix="gamma-bench-history-", dir=args.tmp) as tmp:
        url = redis_url()
        h = Harness(url, Path(tmp), ScriptedGamma(skills))
        h.worker.model_client = scripted_client(ScriptedGamma(skills), Timing(tokens_per_s=80))
        await h.start()
        freezer = gc_as_the_service(h)
        b = Bench(h, Path(tmp), url, args.neighbours + 1)
        try:
            rows = []
            for label in args.sizes:
                rows.append(await measure_size(b, label, SIZES[label], args))
                partial = {"benchmark": "history", "partial": True, "sizes": rows}
                args.out.write_text(json.dumps(partial, indent=2) + "\n")  # kept if a later size fails
            rows = [r for r in rows if "first_wake_error" not in r] + [r for r in rows if "first_wake_error" in r]
            big = next(r["size"] for r in reversed(rows) if "first_wake_error" not in r)
            labels = list(dict.fromkeys(["empty", big]))
            streams = await neighbours(b, args.light_neighbours)
            await asyncio.sleep(3)
            light = await interleaved(b, labels, args.rounds // 2)
            light[big]["rebuild_wake"] = await rebuild_wake(b, big)
            streams += await neighbours(b, args.neighbours - args.light_neighbours, args.light_neighbours)
            await asyncio.sleep(3)
            loaded = await interleaved(b, labels, args.rounds // 2)
            loaded[big]["rebuild_wake"] = await rebuild_wake(b, big)
            sid = f"history-{big.lower()}"
            done_rewinds, lag = await lag_during(rewinds(b, sid))
            loaded[big]["rewinds"] = {**done_rewinds, "neighbour_loop_lag_ms": lag}
            await h.worker.close(sid, "bench")
            ops, lag = await lag_during(asyncio.to_thread(dormant_ops, Path(tmp), sid))
            loaded[big]["dormant_ops"] = {**ops, "neighbour_loop_lag_ms": lag}
            for task in streams:
                task.cancel()
            await asyncio.gather(*streams, return_exceptions=True)
        finally:
            freezer.cancel()
            await b.reader.aclose()
            await h.stop()
    return {"benchmark": "history", "machine": platform.platform(), "rounds": args.rounds,
            "neighbours": args.neighbours, "light_neighbours": args.light_neighbours, "sizes": rows,
            "with_neighbours": loaded, "with_light_neighbours": light,
            "targets": {"wake_to_first_token_p99_over_empty_ms": 150, "held_mb_over_empty": 20,
                        "neighbour_p99_added_ms": 20}}


def table(r: dict[str, Any]) -> str:
    rows = r["sizes"]
    empty = rows[0]
    lines = [f"{'history':>8} {'1st wake':>9} {'wake->live p50/p99':>19} {'wake->1st tok p50/p99':>22} "
             f"{'Δp99 vs empty':>13} {'held MB':>8} {'Δheld':>6} {'RSS MB':>7}"]
    for row in rows:
        if "first_wake_error" in row:
            lines.append(f"{row['size']:>8} first wake failed: {row['first_wake_error']}")
            continue
        w, m = row["wake_to_first_token_ms"], row["memory"]
        lines.append(f"{row['size']:>8} {row['first_wake_ms']:>9} "
                     f"{row['wake_to_live_ms']['p50']:>9}/{row['wake_to_live_ms']['p99']:<9} "
                     f"{w['p50']:>11}/{w['p99']:<10} {w['p99'] - empty['wake_to_first_token_ms']['p99']:>13.1f} "
                     f"{m['held_mb']:>8} {m['held_mb'] - empty['memory']['held_mb']:>6.2f} {m['rss_live_mb']:>7}")
    for key, n in (("with_light_neighbours", r.get("light_neighbours")), ("with_neighbours", r["neighbours"])):
        lines.append(f"with {n} neighbours streaming (rounds alternated):")
        for label, x in r.get(key, {}).items():
            lines.append(f"{label:>8} wake->1st tok p50/p99 {x['wake_to_first_token_ms']['p50']}/"
                         f"{x['wake_to_first_token_ms']['p99']} ms, loop lag p50/p99 {x['neighbour_loop_lag_ms']['p50']}/"
                         f"{x['neighbour_loop_lag_ms']['p99']} ms (wake {x['neighbour_loop_lag_wake_ms']['p99']}, "
                         f"turn {x['neighbour_loop_lag_turn_ms']['p99']})"
                         + (f", wake rebuilding the index {x['rebuild_wake']}" if "rebuild_wake" in x else "")
                         + (f", rewinds {x['rewinds']}" if "rewinds" in x else "")
                         + (f", dormant {x['dormant_ops']}" if "dormant_ops" in x else ""))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--neighbours", type=int, default=100)
    p.add_argument("--light-neighbours", type=int, default=20,
                   help="a first phase with this many neighbours streaming: a loop that is not saturated")
    p.add_argument("--tmp", default=None, help="where the generated sessions go (default: the system's temp dir)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    result = asyncio.run(run(args))
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
