"""`make bench-lifecycle`: what workspace snapshots, rewind and fork cost (docs/architecture.md
"Snapshots, rewind and fork").

For workspaces of 10, 1,000 and 10,000 files (1 KiB each):
- snapshot per tool batch: a batch rewrites one file, as the agent's tools do it: the file tool's
  atomic write (shared/storage/workspace_fs.py) and a sandboxed `bash` call (services/runtime/sandbox, the
  layer `auto` picks); then the runtime's snapshot (shared/storage/snapshots.py `take`). Time and bytes the
  store grew by, beside the batch's own time and bytes written; --batches batches, p50.
- rewind: a batch changed 1% of the files (at least one) and created as many; the dormant rewind
  (shared/history/rewind.py `rewind_on_disk`: snapshot of the abandoned state, restore, leaf move) beside
  copying the changed files back from a backup and copying the whole workspace;
- fork: `shared/history/fork.py` plan + lay out a new session beside copying the whole workspace.
Targets: a snapshot adds <= 10% to a tool batch's time (the bash batch); a rewind of 1,000 files
<= 2x copying the changed files. Prints a table; writes bench/results/lifecycle.json. Run it under
the machine-wide lock (`flock /tmp/gamma-heavy.lock make bench-lifecycle`). Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.runtime.sandbox import Sandbox, select_sandbox  # noqa: E402
from services.runtime.skillset.paths import skills_dir  # noqa: E402
from shared.contracts.records.messages import UserMessage  # noqa: E402
from shared.contracts.records.transcript import MessageEntry, SessionHeader  # noqa: E402
from shared.history import fork, rewind  # noqa: E402
from shared.settings import Settings  # noqa: E402
from shared.storage import workspace_fs  # noqa: E402
from shared.storage.disk import SessionPaths, append_jsonl, session_paths  # noqa: E402
from shared.storage.snapshots import SnapshotLimits, SnapshotStore  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "lifecycle.json"
SIZES = (10, 1000, 10_000)
FILE_BYTES = 1024
LIMITS = SnapshotLimits(max_entries=50_000)


def p50(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def store_bytes(paths: SessionPaths) -> int:
    total = 0
    for dirpath, _, names in os.walk(paths.root / ".snapshots"):
        total += sum(os.path.getsize(os.path.join(dirpath, n)) for n in names)
    return total


def fill(paths: SessionPaths, files: int) -> None:
    for i in range(files):
        d = paths.workspace / f"d{i // 500}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_bytes(os.urandom(FILE_BYTES // 2).hex().encode())
    paths.documents.mkdir(parents=True, exist_ok=True)


def entry(eid: str, parent: str | None) -> dict[str, Any]:
    e = MessageEntry(id=eid, parent_id=parent, timestamp=rewind.now_iso(), message=UserMessage(content=eid))
    return e.model_dump(mode="json", by_alias=True, exclude_none=True)


async def snapshot_per_batch(work: Path, files: int, batches: int, box: Sandbox) -> dict[str, Any]:
    paths = session_paths(work, f"snap{files}")
    fill(paths, files)
    skills = skills_dir().resolve()
    # A session's workspace is handed to the sandbox's user at its first command (chown: every ctime
    # changes once); the batches measured are the ones after that.
    await box.run(box.request("true", paths.workspace, skills, 30))
    store = SnapshotStore.load(paths, LIMITS)
    store.take("e0", "prompt")
    rows: dict[str, list[float]] = {"file_write_ms": [], "bash_ms": [], "snapshot_ms": [], "store_bytes": []}
    for b in range(batches):
        rel = f"d0/f{b % files}.txt"
        data = os.urandom(FILE_BYTES // 2).hex().encode()
        t = time.perf_counter()
        workspace_fs.write_bytes(paths.workspace, rel, data)
        rows["file_write_ms"].append(ms(t))
        t = time.perf_counter()
        res = await box.run(box.request(f"head -c {FILE_BYTES} /dev/urandom > d0/bash{b % files}.bin",
                                        paths.workspace, skills, 30))
        rows["bash_ms"].append(ms(t))
        assert res.exit_code == 0, res
        before = store_bytes(paths)
        t = time.perf_counter()
        record = store.take(f"e{b + 1}", "batch")
        rows["snapshot_ms"].append(ms(t))
        rows["store_bytes"].append(store_bytes(paths) - before)
        assert record is not None
    out = {k: p50(v) for k, v in rows.items() if v}
    out["batch_bytes_written"] = FILE_BYTES * 2  # the file tool's write and bash's
    out["snapshot_share_of_bash_batch"] = round(out["snapshot_ms"] / (out["bash_ms"] + out["snapshot_ms"]), 3)
    return out


def rewind_and_fork(work: Path, files: int) -> dict[str, Any]:
    paths = session_paths(work, f"rw{files}")
    fill(paths, files)
    append_jsonl(paths.transcript, [SessionHeader(id="h0", timestamp=rewind.now_iso()).model_dump(
        mode="json", by_alias=True, exclude_none=True), entry("u1", "h0")])
    store = SnapshotStore.load(paths, LIMITS)
    store.take("u1", "prompt")
    backup = work / f"backup{files}"
    shutil.copytree(paths.workspace, backup)
    changed = max(1, files // 100)
    for i in range(changed):
        (paths.workspace / f"d{i // 500}" / f"f{i}.txt").write_bytes(b"changed by the batch")
        (paths.workspace / f"new{i}.txt").write_bytes(b"created by the batch")
    append_jsonl(paths.transcript, [entry("u2", "u1")])
    store.take("u2", "batch")
    t = time.perf_counter()
    result = rewind.rewind_on_disk(paths, LIMITS, "u1", "rewind", rewind.now_iso())
    rewind_ms = ms(t)
    assert result["changed"] == 2 * changed, result
    scratch = work / f"copy{files}"
    scratch.mkdir()
    t = time.perf_counter()
    for i in range(changed):
        rel = Path(f"d{i // 500}") / f"f{i}.txt"
        (scratch / rel.parent).mkdir(parents=True, exist_ok=True)
        shutil.copy2(backup / rel, scratch / rel)
    copy_changed_ms = ms(t)
    t = time.perf_counter()
    for i in range(changed):  # the same, durably (each file fsync'd, then its directory), as a restore writes
        rel = Path(f"d{i // 500}") / f"f{i}.txt"
        dst = scratch / "durable" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(backup / rel, "rb") as src, open(dst, "wb") as out:
            shutil.copyfileobj(src, out)
            out.flush()
            os.fsync(out.fileno())
    for d in {(scratch / "durable" / f"d{i // 500}") for i in range(changed)}:
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    copy_durable_ms = ms(t)
    t = time.perf_counter()
    shutil.copytree(backup, work / f"copyall{files}")
    copy_all_ms = ms(t)
    t = time.perf_counter()
    plan = fork.plan(paths, LIMITS, "u1", dormant=True)
    fork.lay_out(plan, session_paths(work, f"fork{files}"), LIMITS, {})
    fork_ms = ms(t)
    return {"changed_files": changed, "created_files": changed, "rewind_ms": round(rewind_ms, 2),
            "copy_changed_ms": round(copy_changed_ms, 2), "copy_changed_durable_ms": round(copy_durable_ms, 2),
            "copy_all_ms": round(copy_all_ms, 2), "fork_ms": round(fork_ms, 2),
            "rewind_vs_copy_changed": round(rewind_ms / max(copy_changed_ms, 0.001), 1),
            "rewind_vs_copy_changed_durable": round(rewind_ms / max(copy_durable_ms, 0.001), 1)}


def table(results: dict[str, Any]) -> str:
    lines = ["files   | file write | bash batch | snapshot | store +B | share | rewind (changed) | copy changed "
             "(fsync) | copy all | fork"]
    for n in SIZES:
        s, r = results["snapshot"][str(n)], results["rewind_fork"][str(n)]
        lines.append(f"{n:>7} | {s['file_write_ms']:>8.2f}ms | {s.get('bash_ms', 0):>8.2f}ms | {s['snapshot_ms']:>6.2f}ms "
                     f"| {s['store_bytes']:>8.0f} | {s['snapshot_share_of_bash_batch']:>5.1%} | "
                     f"{r['rewind_ms']:>8.1f}ms ({r['changed_files']:>3}) | {r['copy_changed_ms']:>6.2f}ms "
                     f"({r['copy_changed_durable_ms']:>6.2f}ms) | "
                     f"{r['copy_all_ms']:>7.1f}ms | {r['fork_ms']:>6.1f}ms")
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=30)
    args = ap.parse_args()
    box = select_sandbox(Settings(), skills_dir().resolve())  # the layer `auto` picks, as the runtime does
    results: dict[str, Any] = {"machine": platform.platform(), "cpus": os.cpu_count(), "sandbox": box.layer,
                               "file_bytes": FILE_BYTES, "snapshot": {}, "rewind_fork": {}}
    with tempfile.TemporaryDirectory(prefix="bench-lifecycle-") as tmp:
        work = Path(tmp)
        for n in SIZES:
            results["snapshot"][str(n)] = await snapshot_per_batch(work, n, args.batches, box)
            results["rewind_fork"][str(n)] = rewind_and_fork(work, n)
    s1000, r1000 = results["snapshot"]["1000"], results["rewind_fork"]["1000"]
    results["targets"] = {
        "snapshot_share_of_batch_le_10pct": s1000["snapshot_share_of_bash_batch"] <= 0.10,
        "rewind_1000_le_2x_copy_changed": r1000["rewind_vs_copy_changed"] <= 2.0,
        "rewind_1000_le_2x_copy_changed_durable": r1000["rewind_vs_copy_changed_durable"] <= 2.0,
    }
    print(table(results))
    print(json.dumps(results["targets"]))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
