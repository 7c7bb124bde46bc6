"""The network-fault driver: one fault proxy (tests/support/faultproxy.py) per service between it and
Redis, and a thread that hits each service's link in turn with one kind of fault while the scripted
load runs, then measures how long the service takes to be ready again (its own /readyz, and the
proxy's, which needs every service's heartbeat).

During a partition of the proxy's link it also sends the requests that wait on Redis (a session read,
a prompt, a file write): each must come back as a bounded 503/504, never hang.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.reliability.chaos import Cluster, Report
from tests.support.faultproxy import FaultProxy
from tests.support.stack import API_TOKEN, http_ok

# The services whose Redis link is faulted (compaction's is the same code as digest's consumers).
TARGETS = ("proxy", "runtime", "notifications", "digest")
FAULTS = ("latency", "reset", "half_open", "partition")
LATENCY_MS, JITTER_MS = 50.0, 20.0
PARTITION_S = 10.0
RECONNECT_S = 5.0  # the promise: ready again within this long of the network healing (measured, reported)
# What the tests assert: a service not ready this long after the heal is wedged. The 5 s promise is a
# figure the reports print and the README states, not a wall-clock assert on a loaded 2-core machine
# (a half-open notice plus a reconnect took 5.4 s there under the parallel suite).
WEDGED_S = 30.0
# A half-open link heals nowhere: the service notices when a read on it times out (the command
# timeout, shared/redis/reconnect.py), then reconnects; the same promise counts from then.
HALF_OPEN_NOTICE_S = 5.0
PROBE_DEADLINE_S = 30.0  # a probe that has no answer by then is hanging


@dataclass
class Probe:
    what: str
    status: int | None  # None: no answer within PROBE_DEADLINE_S
    seconds: float


@dataclass
class NetReport:
    recovery_s: dict[str, float] = field(default_factory=dict)  # service -> seconds until ready again
    probes: list[Probe] = field(default_factory=list)
    connections_faulted: dict[str, int] = field(default_factory=dict)


class NetChaos(threading.Thread):
    def __init__(self, fault: str, cluster: Cluster, links: dict[str, FaultProxy], report: Report,
                 sids: Callable[[], list[str]]) -> None:
        super().__init__(daemon=True, name=f"net-{fault}")
        self.fault, self.cluster, self.links, self.report, self.sids = fault, cluster, links, report, sids
        self.net = NetReport()
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.cluster.wait_ready()
            time.sleep(3.0)  # sessions under way before the first fault
            for service in TARGETS:
                self.hit(service)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
            self.report.note(f"net chaos failed: {exc!r}")
        finally:
            self.done.set()

    def hit(self, service: str) -> None:
        self.report.note(f"{self.fault} on {service}'s link")
        healed = self.inject(self.fault, self.links[service], service, probe=service == "proxy")
        self.net.recovery_s[service] = self.wait_recovered((service,), healed)
        self.report.note(f"{service} ready {self.net.recovery_s[service]:.1f}s after the link healed")

    def inject(self, fault: str, link: FaultProxy, name: str, *, probe: bool) -> float:
        """Apply `fault` to `link`; returns when (monotonic) the network counts as healed."""
        if fault == "latency":
            link.set_latency(LATENCY_MS, JITTER_MS)
            time.sleep(6.0)
            link.set_latency(0)
            return time.monotonic()
        if fault == "reset":
            n = 0
            for _ in range(4):
                n += link.reset()
                time.sleep(1.0)
            self.net.connections_faulted[name] = n
            return time.monotonic()
        if fault == "half_open":
            self.net.connections_faulted[name] = link.half_open()
            return time.monotonic() + HALF_OPEN_NOTICE_S
        link.partition()
        started = time.monotonic()
        probes = self.probe_blocking_calls() if probe else []
        time.sleep(max(0.0, PARTITION_S - (time.monotonic() - started)))
        link.heal()
        healed = time.monotonic()
        for t in probes:
            t.join(timeout=PROBE_DEADLINE_S)
        return healed

    def wait_recovered(self, services: tuple[str, ...], healed: float) -> float:
        """Seconds from `healed` until each service's /readyz and the proxy's are 200 (all polled)."""
        deadline = healed + 60
        urls = [self.cluster.stack.url(s) + "/readyz" for s in (*services, "proxy")]
        while time.monotonic() < deadline:
            if time.monotonic() >= healed and all(http_ok(u) for u in urls):
                return max(0.0, time.monotonic() - healed)
            time.sleep(0.1)
        raise RuntimeError(f"{services} not ready 60 s after the link healed")

    def probe_blocking_calls(self) -> list[threading.Thread]:
        """Requests that wait on Redis while the proxy cannot reach it, sent at once, side by side:
        each must answer (a bounded 503/504) before PROBE_DEADLINE_S."""
        sids = self.sids()
        if not sids:
            return []
        sid = sids[0]
        calls = [("GET session", "GET", f"/sessions/{sid}", {}),
                 ("POST message", "POST", f"/sessions/{sid}/messages",
                  {"json": {"message": f"load prompt [probe:{uuid.uuid4().hex[:8]}]"}}),
                 ("PUT file", "PUT", f"/sessions/{sid}/workspace/files/partition.md", {"content": b"x"})]
        threads = [threading.Thread(target=self._probe, args=call, daemon=True) for call in calls]
        for t in threads:
            t.start()
        return threads

    def _probe(self, what: str, method: str, url: str, kw: dict[str, Any]) -> None:
        started = time.monotonic()
        with httpx.Client(base_url=self.cluster.stack.url("proxy"), headers={"Authorization": f"Bearer {API_TOKEN}"},
                          timeout=PROBE_DEADLINE_S) as client:
            try:
                status: int | None = client.request(method, url, **kw).status_code
            except httpx.TimeoutException:
                status = None
        self.net.probes.append(Probe(what, status, round(time.monotonic() - started, 2)))


def proxies_for(redis_port: int, lifetime_s: float) -> dict[str, FaultProxy]:
    return {name: FaultProxy("127.0.0.1", redis_port, lifetime_s=lifetime_s, seed=i).start()
            for i, name in enumerate(TARGETS)}


def service_env(links: dict[str, FaultProxy]) -> dict[str, dict[str, str]]:
    return {name: {"REDIS_URL": f"redis://127.0.0.1:{link.port}/0"} for name, link in links.items()}


def log_tail(data_dir: Path, name: str, lines: int = 30) -> str:
    path = data_dir / "logs" / f"{name}.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""
