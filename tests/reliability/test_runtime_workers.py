"""Three runtime workers share the sessions (docs/architecture.md "Runtime workers"); kill -9 of one moves its sessions to the others.

Real stack (five services plus two more runtime processes, real Redis, scripted model). Sessions are
woken through the shared wake group, so they spread over the workers; the worker holding the most is
killed with SIGKILL while prompts to its sessions are in flight and is not restarted: the other
workers resume its sessions (orphan scan: no lease, stale renewal) and answer every acknowledged
prompt exactly once.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import httpx
import pytest
import redis

from tests.integration.test_notifications_acceptance import USER, create_session, entries, say
from tests.reliability.chaos import Cluster, lease_holders, worker_pid
from tests.reliability.workload import is_completed_answer
from tests.support.polling import wait_sync

pytestmark = [pytest.mark.timeout(240)]
SESSIONS = 9


def holders_by_worker(r: redis.Redis, sids: list[str]) -> dict[str, int]:
    """sid -> pid of the runtime process holding its lease."""
    out = {}
    for sid, (worker, _) in lease_holders(r).items():
        pid = worker_pid(worker)
        if sid in sids and pid is not None:
            out[sid] = pid
    return out


def test_kill_9_of_one_of_three_workers_moves_its_sessions_with_nothing_lost(redis_url: str, tmp_path: Path) -> None:
    cluster = Cluster(redis_url, tmp_path, extra_runtimes=2, GAMMA_LEASE_MS="3000", GAMMA_IDLE_S="120")
    r = redis.Redis.from_url(redis_url)
    try:
        cluster.start()
        stack = cluster.stack
        pids = {name: proc.pid for name, proc in cluster.procs().items() if name.startswith("runtime")}
        assert len(pids) == 3
        sids = [create_session(stack) for _ in range(SESSIONS)]
        for i, sid in enumerate(sids):
            say(stack, sid, f"hello {i}")
        held = holders_by_worker(r, sids)
        assert set(held) == set(sids)
        spread = Counter(held.values())
        assert len(spread) >= 2, f"the wakes did not spread over the workers: {spread}"

        victim_pid, _ = spread.most_common(1)[0]
        victim = next(name for name, pid in pids.items() if pid == victim_pid)
        moved = [sid for sid, pid in held.items() if pid == victim_pid]
        half = len(moved) // 2
        for i, sid in enumerate(moved):
            if i == half:  # the first half acknowledged before the kill (some mid-run), the rest after it,
                # while the dead worker's leases have not expired yet
                cluster.procs()[victim].send_signal(signal.SIGKILL)
                cluster.procs()[victim].wait(timeout=30)
                cluster.held.add(victim)
            resp = httpx.post(f"{stack.url()}/sessions/{sid}/messages", json={"message": f"after the kill {sid}"},
                              headers=USER, timeout=30)
            assert resp.status_code == 202, resp.text

        # A run cut by the kill ends with an "Interrupted" tool result; as in the fault suite's flush, a
        # next prompt's answer then answers it too. Every acknowledged prompt is recorded exactly once.
        for sid in moved:
            say(stack, sid, f"are you there {sid}", timeout_s=90)
        # prompts answered before the kill: their sessions move all the same
        wait_sync(lambda: moved_off(holders_by_worker(r, sids), moved, victim_pid),
                  timeout=60, interval=0.5, what="the victim's sessions held elsewhere")
        now = holders_by_worker(r, sids)
        for sid in moved:
            items = entries(stack, sid)
            users = [e for e in items if e.get("type") == "message" and e["message"].get("role") == "user"
                     and e["message"].get("content") == f"after the kill {sid}"]
            assert len(users) == 1, f"{sid}: the prompt was recorded {len(users)} times"
            at = items.index(users[0])
            assert any(is_completed_answer(e) for e in items[at:]), f"{sid}: the prompt was never answered"
            assert now.get(sid) not in (None, victim_pid), f"{sid} is not held by a surviving worker"
        # The survivors also keep serving their own sessions.
        for sid in [s for s in sids if s not in moved][:2]:
            say(stack, sid, f"still here {sid}")
        print(f"\nspread before the kill: {dict(spread)}; {len(moved)} sessions moved from {victim} to "
              f"{dict(Counter(now[s] for s in moved))}")
    finally:
        cluster.stop()
        r.close()


def moved_off(holders: dict[str, int], moved: list[str], victim_pid: int) -> bool:
    return all(holders.get(sid) not in (None, victim_pid) for sid in moved)
