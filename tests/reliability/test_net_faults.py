"""Network faults between the services and Redis: (latency, reset, half-open, partition) x (proxy,
runtime, notifications, digest).

Each service reaches Redis (AOF, its own port) through a fault proxy of its own
(tests/support/faultproxy.py); compaction connects directly. While sessions notify, save files, edit
decks and prompt, and an SSE client per session follows its events, one kind of fault hits each
service's link in turn (tests/reliability/netfaults.py). Then:
- every service is ready again within RECONNECT_S of its link healing (no restart: nothing exits);
- requests that wait on Redis during the proxy's partition answered 503/504, none hung;
- each SSE client, resuming with Last-Event-ID after a break, received every event once;
- the exactly-once audit of tests/reliability/workload.py: nothing acknowledged lost, nothing twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from shared.redis import keys
from tests.reliability.chaos import Cluster, RedisProcess, Report, Supervisor
from tests.reliability.netfaults import (
    FAULTS,
    RECONNECT_S,
    WEDGED_S,
    NetChaos,
    log_tail,
    proxies_for,
    service_env,
)
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
from tests.support.polling import eventually
from tests.support.sse_follower import SseFollower, compare
from tests.support.stack import API_TOKEN, SERVICE_TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SESSIONS = 4
HEARTBEAT_S = 2.0  # SSE heartbeats: a follower notices a silent stream after two of them
LIFETIME_S = 280.0  # the fault proxies stop by themselves after this long


async def load(client: LoadClient, chaos: NetChaos, records: list[SessionRecord],
               followers: list[SseFollower], proxy_url: str) -> None:
    for _ in range(SESSIONS):
        records.append(await client.create_session())
    tasks = []
    for rec in records:
        follower = SseFollower(proxy_url, rec.sid, HEARTBEAT_S)
        followers.append(follower)
        tasks.append(asyncio.ensure_future(follower.run()))

    async def rounds(rec: SessionRecord) -> None:
        n = 0
        while not chaos.done.is_set() or n < 2:
            await client.round(rec, n)
            n += 1

    await asyncio.gather(*(rounds(r) for r in records))


def connector(redis_url: str) -> Callable[[], aioredis.Redis]:
    return lambda: aioredis.from_url(redis_url)


async def settle(client: LoadClient, records: list[SessionRecord], connect: Callable[[], aioredis.Redis],
                 audit_inputs: dict, report: Report) -> None:
    rclient = connect()
    try:
        await asyncio.gather(*(flush(client, r, rclient, 60, report.note) for r in records))
        backlog = await digest_backlog(rclient)
        for r in records:
            audit_inputs[r.sid] = (await digest_revisions(rclient, r.sid),
                                   await durable_undelivered(rclient, r.sid) | backlog.get(r.sid, set()),
                                   await digest_revisions(rclient, r.sid, "seen"))
    finally:
        await rclient.aclose()


async def sse_outcome(followers: list[SseFollower], connect: Callable[[], aioredis.Redis]) -> dict[str, dict]:
    """Once each follower has caught up with its stream: what it missed or got twice."""
    rclient = connect()
    out = {}
    try:
        for f in followers:
            stored = [i.decode() for i, _ in await rclient.xrange(keys.events(f.sid))]

            async def caught_up(f: SseFollower = f, stored: list[str] = stored) -> bool:
                return not stored or (bool(f.ids) and stored[-1] in f.ids)

            await eventually(caught_up, timeout=30, what=f"SSE client of {f.sid} caught up")
            f.stop()
            missed, duplicated = compare(f.ids, stored)
            out[f.sid] = {"events": len(stored), "received": len(f.ids), "missed": missed[:5],
                          "duplicated": duplicated[:5], "reconnects": f.reconnects, "resets": f.resets}
    finally:
        await rclient.aclose()
    return out


@pytest.mark.parametrize("fault", FAULTS)
def test_network_fault(fault: str, tmp_path: Path) -> None:
    report = Report()
    redis_proc = RedisProcess(tmp_path / "redis")
    redis_proc.start()
    links = proxies_for(redis_proc.port, LIFETIME_S)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    cluster = Cluster(redis_proc.url + "/0", data_dir, extra_runtimes=0, service_env=service_env(links),
                      GAMMA_LEASE_MS="3000", GAMMA_CLAIM_IDLE_MS="1500", GAMMA_REPLY_TIMEOUT_S="5",
                      GAMMA_IDLE_S="60", GAMMA_SSE_HEARTBEAT_S=str(HEARTBEAT_S))
    supervisor = Supervisor(cluster, report)
    records: list[SessionRecord] = []
    chaos = NetChaos(fault, cluster, links, report, lambda: [r.sid for r in records])
    client = LoadClient(cluster.stack.url("proxy"), cluster.stack.url("notifications"), API_TOKEN, SERVICE_TOKEN,
                        request_deadline_s=60, answer_timeout_s=45)
    followers: list[SseFollower] = []
    audit_inputs: dict = {}
    sse: dict[str, dict] = {}
    try:
        cluster.start()
        supervisor.start()
        chaos.start()

        async def main() -> None:
            try:
                await load(client, chaos, records, followers, cluster.stack.url("proxy"))
                cluster.wait_ready()
                await settle(client, records, connector(redis_proc.url + "/0"), audit_inputs, report)
                sse.update(await sse_outcome(followers, connector(redis_proc.url + "/0")))
            finally:
                for f in followers:
                    f.stop()
                await client.aclose()

        asyncio.run(main())
        chaos.join(timeout=5)
    finally:
        supervisor.stopping.set()
        cluster.stop()
        for link in links.values():
            link.stop()
        redis_proc.stop()
    audit = Audit()
    for rec in records:
        current, stuck, seen = audit_inputs.get(rec.sid, ({}, None, None))
        audit_session(rec, data_dir / "sessions" / rec.sid, audit, current, stuck, seen)
    summary = {"fault": fault, "recovery_s": chaos.net.recovery_s, "probes": [vars(p) for p in chaos.net.probes],
               "connections_faulted": chaos.net.connections_faulted, "restarts": report.supervisor_restarts,
               "sse": sse, "requests": client.stats.requests, "retries": client.stats.retries,
               "ambiguous_prompts": client.stats.ambiguous_prompts, **audit.summary()}
    print("\nNET FAULT REPORT " + json.dumps(summary, indent=2))
    print("\n".join(report.events))
    for kind, problems in (("LOSS", audit.losses), ("STUCK", audit.stuck), ("DUPLICATE", audit.duplicates),
                           ("CORRUPT", audit.corrupt)):
        for problem in problems[:10]:
            print(kind, problem)
    assert chaos.error is None, f"{chaos.error}\n" + "\n".join(
        f"--- {n}\n{log_tail(data_dir, n)}" for n in ("proxy", "runtime", "notifications", "digest"))
    assert report.supervisor_restarts == []  # recovered by reconnecting, not by dying
    assert set(chaos.net.recovery_s) == {"proxy", "runtime", "notifications", "digest"}
    print(f"ready after the heal (promise {RECONNECT_S} s): {chaos.net.recovery_s}")
    wedged = {name: s for name, s in chaos.net.recovery_s.items() if s > WEDGED_S}
    assert wedged == {}, f"not ready within {WEDGED_S}s of the link healing: {wedged}"
    if fault == "partition":
        assert chaos.net.probes and all(p.status in (503, 504) for p in chaos.net.probes), chaos.net.probes
    for sid, outcome in sse.items():
        assert outcome["missed"] == [] and outcome["duplicated"] == [] and outcome["resets"] == 0, (sid, outcome)
    assert audit.prompts_checked > 0 and audit.notifications_checked > 0 and audit.artifact_changes_checked > 0
    assert audit.losses == []
    assert audit.stuck == []
    assert audit.misacknowledged == []
    assert audit.duplicates == []
    assert audit.corrupt == []
