"""Fault test on a real Redis Cluster: `kill -9` of a primary mid-load, its replica promoted.

A cluster of its own (3 primaries + 3 replicas, node timeout 2 s), the five services and a second
runtime on it, and the scripted load of tests/reliability (sessions that prompt, save files, edit
decks and receive notifications). A few seconds into the load the primary holding the most sessions'
leases is killed; the cluster promotes its replica. Nothing restarts the services: each must find
the new primary by itself (the cluster client's slot map, the raw readers' `refresh_route`). Then the
same audit as the single-Redis fault suite: every acknowledged prompt, notification and artifact
revision recorded exactly once, nothing stuck, nothing torn. The one loss the design allows is a
write no replica confirmed within `GAMMA_REDIS_WAIT_MS` (a replica lagging on a loaded machine): the
services log each one (`redis_write_unconfirmed`), and a loss whose key is among them is reported
apart, not failed; any other loss fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import threading
import time
from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

from shared.redis import keys
from tests.cluster.conftest import start_cluster
from tests.reliability.chaos import Cluster, Report, Supervisor, lease_holders
from tests.reliability.test_faults import drive
from tests.reliability.workload import (
    Audit,
    LoadClient,
    SessionRecord,
    audit_session,
    digest_backlog,
    digest_revisions,
    durable_undelivered,
    flush,
)
from tests.support.redis_cluster import LocalCluster
from tests.support.stack import API_TOKEN, SERVICE_TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SESSIONS = int(os.environ.get("GAMMA_CLUSTER_FAULT_SESSIONS", "6"))
LEASE_MS = 3000
FLUSH_MAX_S = 60


class PrimaryKill(threading.Thread):
    """After `delay_s` of load: kill -9 the primary holding most leases, wait for its replica's
    promotion, then let the load run a while longer before it winds down."""

    def __init__(self, redis_cluster: LocalCluster, stack: Cluster, report: Report, delay_s: float) -> None:
        super().__init__(daemon=True, name="primary-kill")
        self.redis_cluster, self.stack, self.report, self.delay_s = redis_cluster, stack, report, delay_s
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.victim: int | None = None
        self.promoted_after_s: float | None = None

    def run(self) -> None:
        try:
            time.sleep(self.delay_s)
            self.victim = self._busiest_primary()
            killed_at = time.monotonic()
            self.redis_cluster.kill(self.victim)
            self.report.note(f"kill -9 redis primary :{self.victim}")
            self.redis_cluster.wait_ok(timeout_s=60)
            self.promoted_after_s = round(time.monotonic() - killed_at, 1)
            self.report.note(f"replica promoted after {self.promoted_after_s}s; primaries {self.redis_cluster.primaries()}")
            self.stack.wait_ready(timeout=60)
            self.report.note("stack ready without restarts")
            time.sleep(3)  # load on the new primary (every session makes a round or more in this)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
            self.report.note(f"fault failed: {exc!r}")
        finally:
            self.done.set()

    def _busiest_primary(self) -> int:
        from redis.cluster import RedisCluster as SyncCluster

        with SyncCluster.from_url(self.redis_cluster.url.rsplit("/", 1)[0]) as client:
            holders = lease_holders(client)
        counts = {port: 0 for port in self.redis_cluster.primaries()}
        for sid in holders:
            port = self.redis_cluster.primary_of(keys.lease(sid))
            counts[port] = counts.get(port, 0) + 1
        return max(counts, key=lambda p: counts[p])


def test_primary_killed_mid_load_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    started = time.monotonic()
    own = start_cluster()  # never the shared one: this test kills a node
    own.wait_replicas_synced()  # a replica still syncing confirms no write: the guarantee starts here
    report = Report()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    # A consumer that stops taking entries after the failover is restarted by its stall watchdog (the
    # services' own recovery): within 20 s here, not the default minute, so its backlog still drains.
    stack = Cluster(own.url, data_dir, extra_runtimes=1, GAMMA_LEASE_MS=str(LEASE_MS), GAMMA_CLAIM_IDLE_MS="1500",
                    GAMMA_REPLY_TIMEOUT_S="5", GAMMA_IDLE_S="60", GAMMA_CONSUMER_STALL_S="20",
                    # A service restarted after the node its REDIS_URL names died finds the others.
                    GAMMA_REDIS_CLUSTER_NODES=",".join(f"127.0.0.1:{p}" for p in own.ports))
    supervisor = Supervisor(stack, report)
    fault = PrimaryKill(own, stack, report, delay_s=random.uniform(3.0, 5.0))
    audit = Audit()
    client = LoadClient(stack.stack.url("proxy"), stack.stack.url("notifications"), API_TOKEN, SERVICE_TOKEN,
                        request_deadline_s=45, answer_timeout_s=40)
    digest_current: dict[str, dict[str, int]] = {}
    stuck: dict[str, set[str]] = {}
    seen: dict[str, dict[str, int]] = {}

    async def main() -> list[SessionRecord]:
        rclient = RedisCluster.from_url(own.url.rsplit("/", 1)[0])
        await rclient.initialize()  # learns every node now: the one named by the URL may be the victim
        try:
            records = await drive(client, fault, SESSIONS)  # type: ignore[arg-type]
            stack.wait_ready()
            settled = await asyncio.gather(*(flush(client, r, rclient, FLUSH_MAX_S) for r in records))  # type: ignore[arg-type]
            report.note(f"flushed: {sum(settled)}/{len(records)} sessions settled")
            backlog = await digest_backlog(rclient)  # type: ignore[arg-type]
            for r in records:
                digest_current[r.sid] = await digest_revisions(rclient, r.sid)  # type: ignore[arg-type]
                stuck[r.sid] = await durable_undelivered(rclient, r.sid) | backlog.get(r.sid, set())  # type: ignore[arg-type]
                seen[r.sid] = await digest_revisions(rclient, r.sid, "seen")  # type: ignore[arg-type]
            return records
        finally:
            await client.aclose()
            await rclient.aclose()

    exits: dict[str, list[str]] = {}
    unconfirmed: set[str] = set()
    try:
        stack.start()
        supervisor.start()
        fault.start()
        records = asyncio.run(main())
        fault.join(timeout=5)
    finally:
        supervisor.stopping.set()
        stack.stop()
        own.stop()
        unconfirmed = unconfirmed_keys(stack)
        for name in set(report.supervisor_restarts):  # why it exited: printed with the report
            exits[name] = [line[:600] for line in stack.stack.log(name).splitlines()
                           if '"level": "error"' in line or '"level": "critical"' in line][-8:]
    for rec in records:
        audit_session(rec, data_dir / "sessions" / rec.sid, audit, digest_current.get(rec.sid, {}), stuck.get(rec.sid),
                      seen.get(rec.sid))
    excused = [loss for loss in audit.losses if unconfirmed_write_of(loss) in unconfirmed]
    audit.losses = [loss for loss in audit.losses if loss not in excused]
    summary = {"elapsed_s": round(time.monotonic() - started, 1), "victim": fault.victim,
               "promoted_after_s": fault.promoted_after_s, "supervisor_restarts": report.supervisor_restarts,
               "requests": client.stats.requests, "retries": client.stats.retries,
               "ambiguous_prompts": client.stats.ambiguous_prompts, "unconfirmed_writes": len(unconfirmed),
               "losses_of_unconfirmed_writes": len(excused), **audit.summary()}
    print("\nCLUSTER FAULT REPORT " + json.dumps(summary, indent=2))
    print("\n".join(report.events))
    for name, lines in exits.items():
        print(f"{name} exited; its last errors:", *lines, sep="\n  ")
    for kind, problems in (("LOST UNCONFIRMED (WAIT timed out: the documented limit)", excused), ("LOSS", audit.losses), ("STUCK", audit.stuck), ("MISACKED", audit.misacknowledged),
                           ("DUPLICATE", audit.duplicates), ("CORRUPT", audit.corrupt)):
        for problem in problems[:15]:
            print(kind, problem)

    assert fault.error is None, fault.error
    assert fault.victim is not None and fault.promoted_after_s is not None
    # No service may die of the failover; one may only stop itself through its stall watchdog (and is
    # then restarted like any exited process, as compose and Kubernetes do).
    for name, lines in exits.items():
        assert any("consumer_stalled_exiting" in line for line in lines), (name, lines)
    assert audit.prompts_checked > 0 and audit.notifications_checked > 0 and audit.artifact_changes_checked > 0
    assert audit.losses == []
    assert audit.stuck == []
    assert audit.misacknowledged == []
    assert audit.duplicates == []
    assert audit.corrupt == []


def unconfirmed_keys(stack: Cluster) -> set[str]:
    """The keys of the writes the services acknowledged without a replica's confirmation
    (`redis_write_unconfirmed`, shared/redis/replicas.py): the only acknowledged writes a failover may
    lose (docs/operations.md "Redis Cluster")."""
    found: set[str] = set()
    assert stack.stack.log_dir is not None
    for path in stack.stack.log_dir.glob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if "redis_write_unconfirmed" in line:
                with contextlib.suppress(ValueError):
                    found.add(str(json.loads(line).get("key")))
    return found


def unconfirmed_write_of(loss: str) -> str | None:
    """The key whose unconfirmed write would explain `loss` (an audit line, tests/reliability/workload.py):
    a notification's record, a prompt's inbox."""
    if match := re.match(r"(\S+): notification (\S+) acknowledged but never recorded$", loss):
        return keys.notification(match[1], match[2])
    if match := re.match(r"(\S+): acknowledged prompt \S+ never recorded$", loss):
        return keys.inbox(match[1])
    return None
