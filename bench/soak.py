"""`make soak` / `python -m bench.soak --minutes 20`: a bounded soak of the whole stack.

50 sessions (`--sessions`) of mixed traffic for `--minutes`: each session, in rounds, sends a remote
notification, saves a file, edits its deck and prompts (waiting for the answer: the workload of
tests/reliability/workload.py), and every few rounds also uploads a binary file, asks for a
compaction, or suspends (the next prompt wakes it); after `--rounds` rounds a session retires
(settled, suspended) and the slot opens a new one. The load is paced (open loop): `--rate` rounds
per second across the sessions, each slot's rounds due at fixed times, so the rate is the same in
every minute whatever the shared machine does (a machine-paced load makes RSS, a high-water mark,
follow the machine's speed: a one-off 20-minute soak); a round that starts over a second after its
due time is counted late. Every `--sample-s` the sampler records the RSS and open fds of every
service (its pooled connections apart: `open_files`), Redis' used memory and the session disk's usage, and Redis' keys and memory per kind of
key.

Verdict (bench/soak_report.py), with W = the warm-up (minute 5 of a 20-minute run; a quarter of the
run, at least one minute, for shorter ones: minute 1 of the 3-minute CI run):
- RSS and open fds of every service and Redis' memory: the median of the last minute's samples at
  most 5% above the median of the minute after W (fds: or at most 4 more); fds and Redis' memory by
  their medians over whole waves instead (the window rounded up to a whole number of `rounds` x
  `sessions` / `rate`, 160 s at the defaults), since they follow the live sessions, which the slots
  retire and reopen together (the runtime's files 5-54, Redis 6.5-11.9 MB within a wave): a
  minute's median is the phase of the wave it caught. Redis' memory there is what is not kept for dormant sessions by design (their row, the user's index, the digest's
  revisions, the notification records of the 7-day dedupe window, the digest's handled ids:
  docs/integration.md "Dormant sessions in Redis"): every retired session adds those, so
  they are checked as the disk is, per session: what they grow by per session in the last window
  at most 1.5x the first;
- the session disk: what it grows by per acknowledged write in the last window at most 1.5x the
  first (it holds every transcript and revision, so it grows; a leak grows faster than the writes);
- p99 prompt -> answer of the prompts sent in the last window (the last quarter, at least a minute)
  at most 1.5x the first window's, or at most 0.5 s above it (noise on a sub-second p99), when each
  window holds 500 prompts (the 20-minute run); over fewer (the 3-minute run) a p99 is one or two
  stalls of the machine, so the medians are judged so (0.25 s of slack) and the p99s reported;
- zero lost or duplicated entries (the exactly-once audit), zero failed requests;
- the load paced: the rounds started in every minute within 10% of the offered rate, at most 5% of
  them late (otherwise the other figures measure the machine, not the stack).
Writes /tmp/gamma-soak.json (or `--out`: a soak is a one-off run, bench/README.md), a per-minute table (soak.md) and a chart (soak.png).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.soak_report import render, verdict  # noqa: E402
from tests.reliability.workload import (  # noqa: E402
    Audit,
    LoadClient,
    SessionRecord,
    Unavailable,
    audit_session,
    digest_backlog,
    digest_revisions,
    durable_undelivered,
    flush,
)
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, SERVICE_TOKEN, Stack  # noqa: E402

# Rounds per second offered across the sessions (~700 acknowledged writes a minute): below the ~4 a
# second the shared 2-core machine sustained in the slow minutes of a one-off 20-minute
# machine-paced run, so that a round is late only when the machine is, and counted.
RATE = 2.5
UPLOAD = "upload.bin"


def redis_kept(info: Any) -> int:
    """Redis' memory without its clients' buffers: a blocked reader's or a slow subscriber's output
    buffer follows the phase of the load and the machine's CPU at the moment of the sample, not what
    Redis keeps (INFO memory `mem_clients_normal`)."""
    return int(info["used_memory"]) - int(info.get("mem_clients_normal", 0))


@dataclass
class Sample:
    t: float  # seconds since the load started
    rss: dict[str, int]
    fds: dict[str, int]  # open fds but the pooled connections below (`open_files`)
    redis_bytes: int
    disk_bytes: int
    writes: int  # acknowledged writes so far (prompts, notifications, edits, uploads)
    redis_keys: dict[str, list[int]] = field(default_factory=dict)  # key kind -> [keys, MEMORY USAGE bytes]
    conns: dict[str, int] = field(default_factory=dict)  # established Redis and accepted HTTP connections
    cpu_stall_us: int = 0  # the machine's CPU pressure so far (`cpu_stall_us`): what else ran beside the stack


@dataclass
class SoakLoad:
    """`sessions` slots, each running one session at a time for `rounds` rounds, then retiring it (all
    it acknowledged settled and its audit inputs read while Redis still holds them, then suspended)
    and opening the next: users come and go, so a live session's state stays bounded and what grows
    after the warm-up is what leaks."""
    client: LoadClient
    redis: aioredis.Redis
    stop: threading.Event
    sessions: int
    period_s: float  # between two rounds' due times in one slot: sessions / offered rounds per second
    rounds: int
    t0: float = field(default_factory=time.monotonic)
    wall0: float = field(default_factory=time.time)  # t0 on the clock the prompts are stamped with
    starts: list[tuple[float, float]] = field(default_factory=list)  # (due, started) s since t0
    records: list[SessionRecord] = field(default_factory=list)
    inputs: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # sid -> audit_session's Redis inputs
    errors: list[str] = field(default_factory=list)
    extra_writes: int = 0  # uploads, compactions and suspends acknowledged

    def writes(self) -> int:
        acked = sum(len([p for p in r.prompts if p.prompt_id]) + len(r.notifications)
                    + sum(len(v) for v in r.edits.values()) for r in self.records)
        return acked + self.extra_writes

    async def slot(self, i: int) -> None:
        """Round k of slot i is due at t0 + (i / sessions + k) * period, whatever the answers do: a
        round that overran its successor's time makes that one start late (counted), never the ones
        after it, so the offered rate is the same in every minute (open loop)."""
        offset = i * self.period_s / self.sessions
        k = 0
        while not self.stop.is_set():
            rec = await self.client.create_session()
            self.records.append(rec)
            n = 0
            while n < self.rounds and not self.stop.is_set():
                due = self.t0 + offset + k * self.period_s
                k += 1
                await self.wait_until(due)
                if self.stop.is_set():
                    break
                self.starts.append((round(due - self.t0, 2), round(time.monotonic() - self.t0, 2)))
                try:
                    await self.client.round(rec, n)
                    await self.extra(rec, n)
                except (AssertionError, Unavailable) as exc:
                    self.errors.append(f"{rec.sid} round {n}: {exc!s:.300}")
                n += 1
            await self.retire(rec)

    async def wait_until(self, due: float) -> None:
        """Sleeps until `due` in steps of at most a second (the stop is a thread's event)."""
        for _ in range(int(max(0.0, due - time.monotonic())) + 2):
            left = due - time.monotonic()
            if left <= 0 or self.stop.is_set():
                return
            await asyncio.sleep(min(1.0, left))

    async def retire(self, rec: SessionRecord) -> None:
        try:
            await flush(self.client, rec, self.redis, 90)
            backlog = await digest_backlog(self.redis)
            self.inputs[rec.sid] = (await digest_revisions(self.redis, rec.sid),
                                    await durable_undelivered(self.redis, rec.sid) | backlog.get(rec.sid, set()),
                                    await digest_revisions(self.redis, rec.sid, "seen"))
            await self.client.suspend(rec)
        except (AssertionError, Unavailable) as exc:
            self.errors.append(f"{rec.sid} retiring: {exc!s:.300}")

    async def extra(self, rec: SessionRecord, n: int) -> None:
        proxy = self.client.proxy_for(rec.sid)
        if n % 3 == 1:  # an upload: binary contents, overwritten in place (a dormant session may too)
            blob = random.randbytes(4096 + 512 * (n % 8))
            await self.client._send_until(proxy, "PUT", f"/sessions/{rec.sid}/workspace/files/{UPLOAD}", {200, 201},
                                          content=blob)
            self.extra_writes += 1
        if n % 5 == 2:  # a compaction (409 when the session went dormant meanwhile)
            resp = await self.client._send_until(proxy, "POST", f"/sessions/{rec.sid}/compact", {200, 202, 409})
            self.extra_writes += resp.status_code != 409
        if n % 7 == 4:  # suspended: the next round's writes land dormant and its prompt wakes it
            await self.client.suspend(rec)
            self.extra_writes += 1


def open_files(p: psutil.Process, redis_port: int) -> tuple[int, int]:
    """(open fds but pooled connections, pooled connections) of one service. Pooled: its established
    connections to Redis and the HTTP connections it accepted. Both follow how many requests were in
    flight at the busiest moment, not what leaked: a Redis pool keeps what a burst opened, up to its
    cap (shared/redis/reconnect.py MAX_CONNECTIONS), and the load client keeps its connections alive
    (up to its pools' limits, tests/reliability/workload.py); on the suite's busy machine the proxy's
    fds rose 79.5 -> 87.5 that way in a CI run with nothing leaking. A leaked socket still counts:
    one its peer closed and we did not (CLOSE_WAIT), or any outgoing one but Redis."""
    sockets = p.net_connections(kind="inet")
    listening = {c.laddr.port for c in sockets if c.status == psutil.CONN_LISTEN}
    pooled = sum(1 for c in sockets if c.status == psutil.CONN_ESTABLISHED
                 and ((c.raddr and c.raddr.port == redis_port) or c.laddr.port in listening))
    return p.num_fds() - pooled, pooled


def cpu_stall_us(path: Path = Path("/proc/pressure/cpu")) -> int:
    """Microseconds some task on the machine waited for a CPU (Linux PSI, `some total`; 0 without PSI).
    Its growth per minute is how crowded the machine was: a soak beside the test suite measures the
    suite too, and a minute's p99 or RSS read with it tells the two apart."""
    try:
        first = path.read_text().splitlines()[0]
        return int(first.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return 0


def disk_usage(root: Path) -> int:
    """Bytes of the files under `root` but its logs, by `find` in a child process: a walk in Python held
    this process' GIL for ~2 s per 5,000 files on the loaded 2-core machine (a 3-minute run writes 5,000,
    20 minutes 35,000), stalling the load's event loop longer each sample and inflating its latencies."""
    out = subprocess.run(["find", str(root), "-path", str(root / "logs"), "-prune", "-o", "-type", "f", "-printf", "%s\n"],
                         capture_output=True, text=True, check=False, timeout=120)
    return sum(int(line) for line in out.stdout.split())


def key_kind(key: str) -> str:
    """`session:inbox` for gamma:{sid}:inbox, `gamma:lifecycle` for a global key: what grows in Redis."""
    if key.startswith("gamma:{") and "}:" in key:
        return "session:" + key.split("}:", 1)[1].split(":", 1)[0]
    return ":".join(key.split(":", 2)[:2])


def key_census(client: redis.Redis) -> dict[str, list[int]]:
    """Keys and their MEMORY USAGE summed per kind (a SCAN: a few thousand keys at this load)."""
    found = list(client.scan_iter(count=1000))
    pipe = client.pipeline(transaction=False)
    for raw in found:
        pipe.memory_usage(raw)
    out: dict[str, list[int]] = {}
    for raw, size in zip(found, pipe.execute(raise_on_error=False), strict=True):
        entry = out.setdefault(key_kind(raw.decode(errors="replace")), [0, 0])
        entry[0] += 1
        entry[1] += size if isinstance(size, int) else 0
    return out


class Sampler(threading.Thread):
    def __init__(self, stack: Stack, redis_url: str, load: list[SoakLoad], every_s: float) -> None:
        super().__init__(daemon=True, name="soak-sampler")
        self.stack, self.load, self.every_s = stack, load, every_s
        self.redis = redis.Redis.from_url(redis_url)
        self.redis_port = int(self.redis.connection_pool.connection_kwargs["port"])
        self.samples: list[Sample] = []
        self.started = time.monotonic()
        self.stopping = threading.Event()

    def run(self) -> None:
        self.started = time.monotonic()
        # Until the load stops: the retirement of the last sessions afterwards is no longer the load.
        while not self.stopping.is_set() and not (self.load and self.load[0].stop.is_set()):
            self.samples.append(self.take())
            self.stopping.wait(self.every_s)
        self.samples.append(self.take())
        self.redis.close()

    def take(self) -> Sample:
        rss, fds, conns = {}, {}, {}
        for name, proc in self.stack.procs.items():
            try:
                p = psutil.Process(proc.pid)
                rss[name] = p.memory_info().rss
                fds[name], conns[name] = open_files(p, self.redis_port)
            except psutil.Error:
                rss[name], fds[name], conns[name] = 0, 0, 0
        info: Any = self.redis.info("memory")
        assert self.stack.data_dir is not None
        return Sample(t=round(time.monotonic() - self.started, 1), rss=rss, fds=fds, conns=conns,
                      redis_bytes=redis_kept(info), disk_bytes=disk_usage(self.stack.data_dir),
                      writes=self.load[0].writes() if self.load else 0,
                      redis_keys=key_census(self.redis), cpu_stall_us=cpu_stall_us())


def run(minutes: float, sessions: int = 50, sample_s: float = 10.0, rate: float = RATE, rounds: int = 8,
        work_dir: Path | None = None, retention_s: float = 60.0, census: Path | None = None,
        census_s: float = 30.0) -> dict[str, Any]:
    work = work_dir or Path(tempfile.mkdtemp(prefix="gamma-soak-"))
    url, redis_proc = start_redis_server()
    data_dir = work / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    # Retired sessions leave Redis `retention_s` after they went dormant (the dormant sweep), streams
    # are trimmed twice per retention.
    stack = Stack(redis_url=url + "/0", data_dir=data_dir, env_overrides={
        "GAMMA_IDLE_S": "60", "GAMMA_STREAM_TRIM_INTERVAL_S": str(retention_s / 2),
        "GAMMA_DORMANT_RETENTION_S": str(retention_s)},
        # The runtime's heap census (shared/serving/heapcensus.py), when asked: what grows with the sessions created.
        service_env={"runtime": {"GAMMA_HEAP_CENSUS": str(census), "GAMMA_HEAP_CENSUS_S": str(census_s)}} if census else {})
    stop = threading.Event()
    holder: list[SoakLoad] = []
    sampler = Sampler(stack, url + "/0", holder, sample_s)
    try:
        stack.start()

        async def main() -> None:
            client = LoadClient(stack.url("proxy"), stack.url("notifications"), API_TOKEN, SERVICE_TOKEN,
                                request_deadline_s=60, answer_timeout_s=60, poll_s=0.3, max_poll_s=1.0)
            rclient = aioredis.from_url(url + "/0")
            holder.append(SoakLoad(client, rclient, stop, sessions, sessions / rate, rounds))
            sampler.start()
            threading.Timer(minutes * 60, stop.set).start()
            try:
                await asyncio.gather(*(holder[0].slot(i) for i in range(sessions)))
            finally:
                sampler.stopping.set()
                await client.aclose()
                await rclient.aclose()

        asyncio.run(main())
        sampler.join(timeout=30)
    finally:
        stop.set()
        sampler.stopping.set()
        stack.stop()
        redis_proc.terminate()
        redis_proc.wait(timeout=10)
    return outcome(holder[0], sampler.samples, data_dir, minutes, sessions, sample_s, rate, rounds, retention_s)


def outcome(load: SoakLoad, samples: list[Sample], data_dir: Path, *params: float) -> dict[str, Any]:
    audit = Audit()
    for rec in load.records:
        current, stuck, seen = load.inputs.get(rec.sid, ({}, None, None))
        audit_session(rec, data_dir / "sessions" / rec.sid, audit, current, stuck, seen)
    t0 = load.wall0
    prompts = [(p.sent_at - t0, p.answered_at - p.sent_at) for r in load.records for p in r.prompts
               if p.answered_at is not None and not p.token.startswith("[flush")]
    return {**dict(zip(("minutes", "sessions", "sample_s", "rate", "rounds", "retention_s"), params, strict=True)),
            "sessions_run": len(load.records), "starts": load.starts, "samples": [vars(s) for s in samples], "prompts": prompts,
            "errors": load.errors[:20], "error_count": len(load.errors), "audit": audit.summary(),
            "audit_problems": (audit.losses + audit.duplicates + audit.stuck + audit.corrupt)[:20]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=RATE, help="rounds per second offered across the sessions")
    parser.add_argument("--retention-s", type=float, default=60.0, help="GAMMA_DORMANT_RETENTION_S")
    parser.add_argument("--rounds", type=int, default=8, help="rounds per session before it retires")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gamma-soak.json"))
    parser.add_argument("--census", type=Path, help="the runtime's heap census, a JSONL file (GAMMA_HEAP_CENSUS)")
    parser.add_argument("--census-s", type=float, default=30.0, help="seconds between two census lines")
    args = parser.parse_args(argv)
    result = run(args.minutes, args.sessions, args.sample_s, args.rate, args.rounds, retention_s=args.retention_s,
                 census=args.census and args.census.resolve(), census_s=args.census_s)
    result["verdict"] = verdict(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    table = render(result, args.out.with_suffix(".png"))
    args.out.with_suffix(".md").write_text(table)
    print(table)
    print(json.dumps(result["verdict"], indent=2))
    return 0 if result["verdict"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
