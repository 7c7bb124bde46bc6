"""Network faults between the services and a Redis Cluster (3 primaries + 3 replicas).

Cluster clients learn the nodes' addresses from CLUSTER SLOTS, so each node gets a fault proxy of its
own (tests/support/faultproxy.py) and announces the proxy's address (`cluster-announce-ip/port`; the
cluster bus keeps its real port, so the nodes never see the faults and nothing fails over). Every
service therefore reaches every node through its proxy. While the scripted load runs and an SSE
client follows each session, the primary holding the most leases has its link hit by latency,
resets, half-open connections and a 10 s partition in turn; after each, every service is ready again
within RECONNECT_S. Then the SSE clients and the exactly-once audit, as on a single Redis
(tests/reliability/test_net_faults.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import pytest
import redis
from redis.asyncio.cluster import RedisCluster

from shared.redis import keys
from tests.cluster.conftest import start_cluster
from tests.reliability.chaos import Cluster, Report, Supervisor, lease_holders
from tests.reliability.netfaults import FAULTS, RECONNECT_S, WEDGED_S, NetChaos
from tests.reliability.test_net_faults import load, settle, sse_outcome
from tests.reliability.workload import Audit, LoadClient, SessionRecord, audit_session
from tests.support.faultproxy import FaultProxy
from tests.support.polling import wait_sync
from tests.support.redis_cluster import LocalCluster
from tests.support.sse_follower import SseFollower
from tests.support.stack import API_TOKEN, SERVICE_TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]

SERVICES = ("proxy", "runtime", "notifications", "digest", "compaction")


def announce_proxies(own: LocalCluster, lifetime_s: float) -> dict[int, FaultProxy]:
    """A proxy per node, announced in its place; returns node port -> proxy once every node's view
    (CLUSTER SLOTS) names only proxies."""
    links = {port: FaultProxy("127.0.0.1", port, lifetime_s=lifetime_s, seed=port).start() for port in own.ports}
    for port, link in links.items():
        with contextlib.closing(own.client(port)) as c:
            c.config_set("cluster-announce-ip", "127.0.0.1")
            c.config_set("cluster-announce-bus-port", port + 10000)
            c.config_set("cluster-announce-port", link.port)
    wanted = {link.port for link in links.values()}

    def announced() -> set[int]:
        seen: set[int] = set()
        for port in own.ports:
            with contextlib.suppress(redis.RedisError), contextlib.closing(own.client(port)) as c:
                for _start, _end, *nodes in c.execute_command("CLUSTER", "SLOTS"):
                    seen.update(int(n[1]) for n in nodes)
        return seen

    wait_sync(lambda: announced() == wanted, timeout=30, interval=0.2, what="every node announcing its link's port",
              detail=lambda: announced() - wanted)
    return links


class ClusterNetChaos(NetChaos):
    """Every fault in turn on the link of the primary that holds the most leases."""

    def __init__(self, own: LocalCluster, by_node: dict[int, FaultProxy], *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.own, self.by_node = own, by_node
        self.victim: int | None = None

    def run(self) -> None:
        try:
            self.cluster.wait_ready()
            time.sleep(3.0)
            self.victim = self.busiest_primary()
            for fault in FAULTS:
                self.report.note(f"{fault} on primary :{self.victim}'s link")
                healed = self.inject(fault, self.by_node[self.victim], fault, probe=fault == "partition")
                self.net.recovery_s[fault] = self.wait_recovered(SERVICES, healed)
                self.report.note(f"ready {self.net.recovery_s[fault]:.1f}s after the link healed")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
            self.report.note(f"net chaos failed: {exc!r}")
        finally:
            self.done.set()

    def busiest_primary(self) -> int:
        from redis.cluster import RedisCluster as SyncCluster

        with SyncCluster(host="127.0.0.1", port=self.own.ports[0]) as client:
            holders = lease_holders(client)
        counts = {port: 0 for port in self.own.primaries()}
        node_of = {link.port: node for node, link in self.by_node.items()}  # CLUSTER SLOTS names the proxies
        for sid in holders:
            port = node_of[self.own.primary_of(keys.lease(sid))]
            counts[port] = counts.get(port, 0) + 1
        return max(counts, key=lambda p: counts[p])


def test_cluster_network_faults(tmp_path: Path) -> None:
    own = start_cluster()  # never the shared one: its nodes announce proxies that stop with this test
    report = Report()
    by_node = announce_proxies(own, lifetime_s=330)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    first = by_node[own.ports[0]].port
    stack = Cluster(f"redis://127.0.0.1:{first}/0", data_dir, extra_runtimes=0, GAMMA_REDIS_CLUSTER="1",
                    GAMMA_LEASE_MS="3000", GAMMA_CLAIM_IDLE_MS="1500", GAMMA_REPLY_TIMEOUT_S="5", GAMMA_IDLE_S="60",
                    GAMMA_SSE_HEARTBEAT_S="2",
                    GAMMA_REDIS_CLUSTER_NODES=",".join(f"127.0.0.1:{p.port}" for p in by_node.values()))
    supervisor = Supervisor(stack, report)
    records: list[SessionRecord] = []
    chaos = ClusterNetChaos(own, by_node, "cluster", stack, {}, report, lambda: [r.sid for r in records])
    client = LoadClient(stack.stack.url("proxy"), stack.stack.url("notifications"), API_TOKEN, SERVICE_TOKEN,
                        request_deadline_s=60, answer_timeout_s=45)
    followers: list[SseFollower] = []
    audit_inputs: dict = {}
    sse: dict[str, dict] = {}

    def connect() -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=first)

    try:
        stack.start()
        supervisor.start()
        chaos.start()

        async def main() -> None:
            try:
                await load(client, chaos, records, followers, stack.stack.url("proxy"))
                stack.wait_ready()
                await settle(client, records, connect, audit_inputs, report)  # type: ignore[arg-type]
                sse.update(await sse_outcome(followers, connect))  # type: ignore[arg-type]
            finally:
                for f in followers:
                    f.stop()
                await client.aclose()

        asyncio.run(main())
        chaos.join(timeout=5)
    finally:
        supervisor.stopping.set()
        stack.stop()
        for link in by_node.values():
            link.stop()
        own.stop()
    audit = Audit()
    for rec in records:
        current, stuck, seen = audit_inputs.get(rec.sid, ({}, None, None))
        audit_session(rec, data_dir / "sessions" / rec.sid, audit, current, stuck, seen)
    summary = {"victim": chaos.victim, "recovery_s": chaos.net.recovery_s, "probes": [vars(p) for p in chaos.net.probes],
               "restarts": report.supervisor_restarts, "sse": sse, **audit.summary()}
    print("\nCLUSTER NET FAULT REPORT " + json.dumps(summary, indent=2))
    print("\n".join(report.events))
    for problem in (audit.losses + audit.stuck + audit.duplicates + audit.corrupt)[:20]:
        print("PROBLEM", problem)
    assert chaos.error is None, chaos.error
    assert report.supervisor_restarts == []
    assert set(chaos.net.recovery_s) == set(FAULTS)
    print(f"ready after the heal (promise {RECONNECT_S} s): {chaos.net.recovery_s}")
    wedged = {name: s for name, s in chaos.net.recovery_s.items() if s > WEDGED_S}
    assert wedged == {}, f"not ready within {WEDGED_S}s of the link healing: {wedged}"
    for sid, outcome in sse.items():
        assert outcome["missed"] == [] and outcome["duplicated"] == [] and outcome["resets"] == 0, (sid, outcome)
    assert audit.prompts_checked > 0 and audit.notifications_checked > 0 and audit.artifact_changes_checked > 0
    assert audit.losses == [] and audit.stuck == [] and audit.misacknowledged == []
    assert audit.duplicates == [] and audit.corrupt == []
