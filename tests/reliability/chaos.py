"""The fault injector: a Redis with AOF on its own port, the five services plus a second runtime as
real processes, a supervisor that restarts whatever exits (as Kubernetes or compose would), and the
faults themselves: kill -9, SIGSTOP past the lease, a Redis restart."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from services.stack import redis_answers
from shared.redis import keys
from tests.support.ports import free_port
from tests.support.redis_server import start_redis_server
from tests.support.stack import SERVICES, Stack, http_ok

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Report:
    kills: list[str] = field(default_factory=list)
    supervisor_restarts: list[str] = field(default_factory=list)
    stopped_worker: str | None = None
    sessions_taken_over: int = 0
    stale_publishes: int = 0
    redis_restarts: int = 0
    events: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.events.append(f"{time.strftime('%H:%M:%S')} {text}")


class RedisProcess:
    """redis-server with AOF (appendfsync always): what it acknowledged survives kill -9."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        _, self.proc = start_redis_server(appendonly=True, port=self.port, data_dir=str(self.data_dir))

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Cluster:
    """The stack (one process per service) plus `extra_runtimes` more runtime workers."""

    def __init__(self, redis_url: str, data_dir: Path, extra_runtimes: int = 1,
                 service_env: dict[str, dict[str, str]] | None = None, **env: str) -> None:
        self.stack = Stack(redis_url=redis_url, data_dir=data_dir, env_overrides=env, service_env=service_env or {})
        self.extra: dict[str, subprocess.Popen[bytes]] = {}
        self.extra_ports = {f"runtime{i + 2}": free_port() for i in range(extra_runtimes)}
        self.lock = threading.RLock()
        self.held: set[str] = set()  # being faulted on purpose: the supervisor keeps off

    def start(self) -> None:
        self.stack.start()
        for name in self.extra_ports:
            self.start_extra(name)

    def start_extra(self, name: str, wait: bool = True) -> None:
        env = dict(self.stack.env_for("runtime"), GAMMA_RUNTIME_PORT=str(self.extra_ports[name]), GAMMA_INSTANCE=name)
        assert self.stack.log_dir is not None
        log = open(self.stack.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the child
        self.extra[name] = subprocess.Popen([sys.executable, "-m", "services.runtime"], env=env, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.time() + 60
        while wait and not http_ok(f"http://127.0.0.1:{self.extra_ports[name]}/healthz"):
            if time.time() > deadline or self.extra[name].poll() is not None:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.1)

    def procs(self) -> dict[str, subprocess.Popen[bytes]]:
        return {**self.stack.procs, **self.extra}

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs()[name]
        proc.send_signal(sig)
        if sig == signal.SIGKILL:
            proc.wait(timeout=30)

    def restart(self, name: str, wait: bool = True) -> None:
        if name in self.extra:
            self.start_extra(name, wait=wait)
        else:
            self.stack.start(name, wait=wait)

    def ready(self) -> bool:
        return http_ok(self.stack.url("proxy") + "/readyz")

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while not self.ready():
            if time.time() > deadline:
                raise RuntimeError("the stack did not become ready again")
            time.sleep(0.2)

    def stop(self) -> None:
        with self.lock:
            self.held = set(self.procs())
            for proc in self.extra.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.terminate()
            self.stack.stop()
            for proc in self.extra.values():
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()


class Supervisor(threading.Thread):
    """Restarts any process that exited and is not being faulted on purpose."""

    def __init__(self, cluster: Cluster, report: Report) -> None:
        super().__init__(daemon=True, name="supervisor")
        self.cluster = cluster
        self.report = report
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            with self.cluster.lock:
                for name, proc in self.cluster.procs().items():
                    if name in self.cluster.held or proc.poll() is None:
                        continue
                    self.report.supervisor_restarts.append(name)
                    self.report.note(f"supervisor: {name} exited ({proc.returncode}), restarting")
                    try:
                        self.cluster.restart(name, wait=False)
                    except Exception as exc:  # noqa: BLE001 - keep supervising; the next pass retries
                        self.report.note(f"supervisor: restart of {name} failed: {exc}")


def lease_holders(client: redis.Redis) -> dict[str, tuple[str, int]]:
    """sid -> (worker id, fence) of every live session."""
    out: dict[str, tuple[str, int]] = {}
    for key in client.scan_iter(match="gamma:{*}:lease", count=500):
        value = client.get(key)
        if value is None:
            continue
        sid = key.decode()[len("gamma:{"):key.decode().index("}")]
        worker, _, fence = value.decode().rpartition(":")
        out[sid] = (worker, int(fence))
    return out


def worker_pid(worker_id: str) -> int | None:
    m = re.search(r"-(\d+)$", worker_id)
    return int(m.group(1)) if m else None


class Chaos(threading.Thread):
    """kill -9 each service in turn at a random moment, then SIGSTOP a runtime past its lease, then
    restart Redis; each fault waits for the stack to be ready again before the next."""

    def __init__(self, cluster: Cluster, redis_proc: RedisProcess, report: Report, seed: int,
                 lease_ms: int, data_dir: Path) -> None:
        super().__init__(daemon=True, name="chaos")
        self.cluster = cluster
        self.redis_proc = redis_proc
        self.report = report
        self.rng = random.Random(seed)
        self.lease_ms = lease_ms
        self.data_dir = data_dir
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.stop_checks: dict[str, Any] = {}

    def run(self) -> None:
        try:
            self.kill_each()
            self.pause_a_runtime()
            self.restart_redis()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
            self.report.note(f"chaos failed: {exc!r}")
        finally:
            self.done.set()

    def kill_each(self) -> None:
        order = list(SERVICES)
        self.rng.shuffle(order)
        for name in order:
            # Load runs between the kills (the restart and readiness wait add ~2 s more); 1.5-4 s here
            # made the kills take half the suite's time for no more interleavings than this.
            time.sleep(self.rng.uniform(0.5, 2.0))
            with self.cluster.lock:
                self.cluster.held.add(name)
                self.cluster.kill(name)
                self.report.kills.append(name)
                self.report.note(f"kill -9 {name}")
            time.sleep(self.rng.uniform(0.1, 1.0))
            with self.cluster.lock:
                self.cluster.restart(name)
                self.cluster.held.discard(name)
            self.cluster.wait_ready()

    def _client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_proc.url + "/0")

    def pause_a_runtime(self) -> None:
        client = self._client()
        runtimes = {name: proc.pid for name, proc in self.cluster.procs().items() if name.startswith("runtime")}
        deadline = time.time() + 20
        victims: dict[str, tuple[str, int]] = {}
        target = ""
        while time.time() < deadline:
            holders = lease_holders(client)
            by_pid: dict[int, dict[str, tuple[str, int]]] = {}
            for sid, (worker, fence) in holders.items():
                pid = worker_pid(worker)
                if pid is not None:
                    by_pid.setdefault(pid, {})[sid] = (worker, fence)
            target = max(runtimes, key=lambda n: len(by_pid.get(runtimes[n], {})))
            victims = by_pid.get(runtimes[target], {})
            if victims:
                break
            time.sleep(0.5)
        if not victims:
            self.report.note("SIGSTOP skipped: no runtime held a session")
            return
        sizes = {sid: self._transcript_size(sid) for sid in victims}
        proc = self.cluster.procs()[target]
        with self.cluster.lock:
            self.cluster.held.add(target)
        proc.send_signal(signal.SIGSTOP)
        stopped_at_ms = int(time.time() * 1000)
        self.report.stopped_worker = target
        self.report.note(f"SIGSTOP {target} holding {len(victims)} sessions")
        # Past the lease, and until another worker holds each session and has written to it.
        deadline = time.time() + max(self.lease_ms / 1000 * 8, 30)
        time.sleep(self.lease_ms / 1000 * 1.5)
        taken: set[str] = set()
        while time.time() < deadline and len(taken) < len(victims):
            holders = lease_holders(client)
            for sid, (worker, _) in victims.items():
                now = holders.get(sid)
                if now is not None and now[0] != worker and self._transcript_size(sid) > sizes[sid]:
                    taken.add(sid)
            time.sleep(0.3)
        self.report.sessions_taken_over = len(taken)
        self.report.note(f"{len(taken)}/{len(victims)} sessions taken over; SIGCONT {target}")
        resumed_at_ms = int(time.time() * 1000)
        proc.send_signal(signal.SIGCONT)
        time.sleep(self.lease_ms / 1000)  # let the resumed worker notice it lost its leases
        # The resumed worker publishes nothing for the sessions it lost: no SessionDormant (or
        # anything else) with its old fence after it resumed.
        stale = 0
        for _entry_id, fields in client.xrange("gamma:lifecycle", min=f"{resumed_at_ms}-0"):
            blob = b" ".join(v for v in fields.values() if isinstance(v, bytes))
            for sid, (_, fence) in victims.items():
                if sid.encode() in blob and f'"fence":{fence}'.encode() in blob.replace(b" ", b""):
                    stale += 1
        self.report.stale_publishes = stale
        self.stop_checks = {"victims": list(victims), "taken": sorted(taken), "stopped_at_ms": stopped_at_ms}
        with self.cluster.lock:
            self.cluster.held.discard(target)
        client.close()

    def _transcript_size(self, sid: str) -> int:
        path = self.data_dir / "sessions" / sid / "transcript.jsonl"
        return path.stat().st_size if path.exists() else 0

    def restart_redis(self) -> None:
        time.sleep(self.rng.uniform(0.5, 2.0))
        self.redis_proc.kill()
        self.report.note("kill -9 redis")
        time.sleep(self.rng.uniform(0.5, 1.5))
        self.redis_proc.start()
        self.report.redis_restarts += 1
        self.report.note("redis restarted (AOF)")
        deadline = time.time() + 30
        while not redis_answers(self.redis_proc.url):
            if time.time() > deadline:
                raise RuntimeError("redis did not come back")
            time.sleep(0.1)
        # Heartbeat keys came back with the AOF: wait until every service has written its own anew
        # (a beat a second), so "ready" means the services really are (not a sleep past their TTL).
        self._wait_fresh_heartbeats(int(time.time() * 1000), timeout_s=30)
        self.cluster.wait_ready(timeout=60)
        self.report.note("stack ready after the Redis restart")

    def _wait_fresh_heartbeats(self, since_ms: int, timeout_s: float) -> None:
        client = self._client()
        deadline = time.time() + timeout_s
        try:
            while time.time() < deadline:
                try:
                    beats = client.mget([keys.health(name) for name in SERVICES])
                except redis.RedisError:
                    beats = [None]
                if all(b is not None and int(b) > since_ms for b in beats):
                    return
                time.sleep(0.2)
        finally:
            client.close()
        raise RuntimeError("the services did not beat again after the Redis restart")
