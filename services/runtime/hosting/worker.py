"""The worker: holds session leases, runs one multiplexed inbox reader, renews, idles sessions out.

Wake → lease (SET NX PX + fence) → wait for no dormant-write → restore → SessionLive → read the
inbox (claiming what an earlier holder left pending). Idle past GAMMA_IDLE_S, Stop or SIGTERM →
persist, release the lease, SessionDormant.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
import structlog
from openai import AsyncOpenAI
from prometheus_client import CollectorRegistry
from redis.exceptions import RedisError

from services.runtime.hosting.image_gc import ImageCollector
from services.runtime.hosting.model_calls import ModelCalls
from services.runtime.hosting.session import Session
from services.runtime.hosting.session_deps import WorkerParts
from services.runtime.hosting.share import heartbeat, over_share, pause_while_over_share
from services.runtime.hosting.wake_timing import WakeClock, start_reading
from services.runtime.live.diskfence import DiskFenceBusy, FenceBehind
from services.runtime.live.events import BusPublish, Outbox, tell_wake_failed
from services.runtime.live.lease import (
    Lease,
    forget_deleted,
    raise_fence,
    renew_all,
    wait_no_dormant_write,
)
from services.runtime.live.sender import EventSender
from services.runtime.runs.turn_starts import StartGate
from services.runtime.skillset.prompt import static_prefix
from services.runtime.skillset.skills import Skill
from shared.contracts.base import now_ms
from shared.contracts.streams.wake import Wake
from shared.history.tokens import TokenCounter
from shared.redis import dormancy, keys
from shared.redis.redis_wire import text
from shared.redis.session_locks import SessionLocks
from shared.serving import gcpolicy
from shared.serving.diskhealth import DiskHealth
from shared.serving.model import reads_merged
from shared.settings import Settings
from shared.streams.inbox import InboxReader
from shared.streams.trim import trim_all
from shared.telemetry import metrics

log = structlog.get_logger()
STOP_WAIT_S = 5.0
# Sessions renewed (and scanned for foreign inbox entries) per round trip. redis-py spends ~50 us of
# event-loop time per pipelined command, so one pipeline for 200 sessions held every other task
# (an injection being recorded, a run) for ~20 ms each pass; chunks keep each hold to ~2 ms.
HOUSEKEEPING_CHUNK = 32


class Worker:
    def __init__(self, settings: Settings, client: aioredis.Redis, model_client: AsyncOpenAI,
                 skills: Mapping[str, Skill], system_prompts: Mapping[str, str], bus: BusPublish,
                 worker_id: str, registry: CollectorRegistry | None = None, disk: DiskHealth | None = None) -> None:
        self.settings = settings
        # No lease is taken while the session disk is full or failing: a session it cannot persist
        # would only fail its writes; its wake waits in the stream until the disk is back.
        self.disk = disk
        self.registry = registry
        self.client = client
        self.bus = bus
        self.worker_id = worker_id
        self.system_prompts = system_prompts
        self.reader = InboxReader(client, worker_id)
        self.sessions: dict[str, Session] = {}
        self._locks = SessionLocks()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._trimmed_at = 0
        self._swept_at = 0
        self._closing: set[asyncio.Task[None]] = set()  # closes asked for by a Stop
        self.counter = TokenCounter()
        self.model_client = model_client
        self.skills = skills
        self.static_prefix = static_prefix(skills)  # the same for every session: built once, not per wake
        # Every session's events: one owner of their order, one pipeline per coalescing window (sender.py).
        self.sender = EventSender(client, settings.runtime.delta_coalesce_ms / 1000, sends_per_s=settings.runtime.delta_sends_per_s,
                                  min_period_s=settings.runtime.delta_coalesce_min_ms / 1000)
        # Model streams read once per tick (sender.py) only where one read returns all that arrived (aiohttp).
        self.read_gate = self.sender if settings.runtime.delta_coalesce_ms > 0 and reads_merged(settings) else None
        # Turns in their start at once (turn_starts.py): the tick above runs late behind too many.
        self.model_calls = ModelCalls.of(settings, registry)  # shared by the worker's sessions
        self.starts = StartGate(settings.runtime.turn_starts_at_once, settings.runtime.turn_start_max_wait_ms / 1000)
        self.images = ImageCollector(settings.images.images_gc_grace_s, registry)
        if registry is not None:
            metrics.track_active_leases(registry, lambda: len(self.sessions))
        self.parts = WorkerParts(settings=settings, client=client, model_client=model_client, skills=skills,
                                 system_prompts=system_prompts, counter=self.counter, ack=self.reader.ack,
                                 static_prefix=self.static_prefix, sender=self.sender, bus=bus, images=self.images,
                                 request_close=self._request_close, registry=registry, model_calls=self.model_calls,
                                 read_gate=self.read_gate, starts=self.starts)

    def start(self) -> None:
        # A full GC pass's pause would hold every streaming session's tokens (shared/serving/gcpolicy.py).
        gcpolicy.defer_while(lambda: not self.sender.idle)
        self._tasks = [asyncio.ensure_future(self._read_loop()), asyncio.ensure_future(self._house_loop()),
                       asyncio.ensure_future(self._orphan_loop())]

    # ------------------------------------------------------------ wake
    async def on_wake(self, wake: Wake) -> None:
        clock = WakeClock()
        if self.disk is not None and not self.disk.ok:  # read before the disk failed: it waits here
            log.warning("wake_held_disk", session_id=wake.session_id, state=self.disk.current.state)
            await self.disk.wait_ok()
        async with self._locks.hold(wake.session_id):
            for _ in range(2):  # a second time only when the disk's fence was ahead of Redis's counter
                if wake.session_id in self.sessions:
                    return
                lease, locked, row = await Lease.acquire_for_wake(self.client, wake.session_id, self.worker_id,
                                                                  self.settings.runtime.lease_ms)
                clock.mark("lease")
                if lease is None:
                    log.info("wake_ignored_live_elsewhere_or_deleting", session_id=wake.session_id)
                    return
                if await self.client.zscore(keys.SESSIONS_DELETED, wake.session_id) is not None:
                    await forget_deleted(self.client, lease)  # erased after an old wake was sent
                    return
                try:
                    if locked:  # the proxy is writing dormant state: read the disk after it is done
                        row = await wait_no_dormant_write(self.client, wake.session_id)
                    await self._open(wake, lease, row, clock)
                    return
                except FenceBehind as behind:
                    if not lease.valid_now():  # it expired while the claim waited: a newer holder claimed
                        log.info("wake_ignored_claimed_meanwhile", session_id=wake.session_id)
                        return
                    # Held, yet the disk saw a newer fence: Redis lost its counter (restore, failover).
                    log.warning("fence_behind_disk", session_id=wake.session_id, fence=lease.fence,
                                stored=behind.stored)
                    await raise_fence(self.client, wake.session_id, behind.stored)
                    await lease.release()
                except DiskFenceBusy:
                    # The session's last holder is frozen inside a write (it holds the fence's lock): let
                    # the lease go; the orphan scan tries again, and it succeeds once that process
                    # resumes (its write then lands before our read) or dies.
                    log.warning("wake_waits_for_frozen_writer", session_id=wake.session_id)
                    with contextlib.suppress(Exception):
                        await lease.release()
                    return
                except Exception as exc:
                    with contextlib.suppress(Exception):
                        await lease.release()
                    log.exception("wake_failed", session_id=wake.session_id)
                    await tell_wake_failed(Outbox(self.sender, wake.session_id, self.bus), exc)
                    raise

    async def _open(self, wake: Wake, lease: Lease, row: dict[str, str], clock: WakeClock) -> None:
        session = await Session.open(self.parts, wake, lease, row, clock)
        self.sessions[wake.session_id] = session
        await session.go_live(self.worker_id, lambda: self._session_loop(session, clock), clock)

    async def _session_loop(self, session: Session, clock: WakeClock) -> None:
        try:
            if not await start_reading(self.reader, session, clock):
                return  # closed meanwhile
            await session.serve()
        except Exception:  # a loop ended by a bug must not keep the lease unread: closed, its unacked left
            log.exception("session_loop_failed", session_id=session.sid)
            if not session.lease.lost:
                return self._request_close(session.sid, "failed")
        finally:
            if self.sessions.get(session.sid) in (None, session):  # a registration the close raced with
                self.reader.remove(session.sid)
        if session.lease.lost:
            await self._drop(session)

    async def wake_pause(self) -> None:
        """Before a wake read: over its share of live sessions, leave wakes to peers (share.py); none on a bad disk."""
        if self.disk is not None and not self.disk.ok:
            log.warning("wakes_held_disk", state=self.disk.current.state)
            await self.disk.wait_ok()
            log.info("wakes_resumed_disk", state=self.disk.current.state)
        await pause_while_over_share(self.client, lambda: len(self.sessions), self._live_worker_ms,
                                     lambda: self._stopping)

    # ------------------------------------------------------------ loops
    async def _read_loop(self) -> None:
        while not self._stopping:
            try:
                entries = await self.reader.read(block_ms=500)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Redis hiccup or a stream gone: retry
                log.exception("inbox_read_failed")
                await asyncio.sleep(0.5)
                continue
            for entry in entries:
                session = self.sessions.get(entry.session_id)
                if session is not None:
                    session.deliver(entry)
            if not self.reader.sessions:
                await asyncio.sleep(0.2)

    @property
    def _house_interval_s(self) -> float:
        return max(self.settings.runtime.lease_ms / 3000, 0.2)

    @property
    def _live_worker_ms(self) -> int:
        """A worker whose last heartbeat is older than three housekeeping passes is gone."""
        return int(3000 * self._house_interval_s)

    async def _house_loop(self) -> None:
        # Passes start an interval apart, at once after an overrun: renewals must not drift (lease.py).
        due = (loop := asyncio.get_running_loop()).time()
        while not self._stopping:
            try:
                await heartbeat(self.client, self.worker_id)
            except (RedisError, OSError):
                log.warning("heartbeat_failed")
            await asyncio.sleep((due := max(due + self._house_interval_s, loop.time())) - loop.time())
            try:
                await self._housekeep()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a Redis hiccup: the next pass renews again
                log.exception("housekeeping_failed")

    async def _housekeep(self) -> None:
        sessions = list(self.sessions.values())
        for i in range(0, len(sessions), HOUSEKEEPING_CHUNK):
            await self._housekeep_chunk(sessions[i : i + HOUSEKEEPING_CHUNK])
        if now_ms() - self._trimmed_at >= self.settings.bus.stream_trim_interval_s * 1000:
            self._trimmed_at = now_ms()
            # The inboxes are read (and acked) only here: trim them to what the runtime group acked.
            for i in range(0, len(sessions), HOUSEKEEPING_CHUNK):
                await trim_all(self.client, [keys.inbox(s.sid) for s in sessions[i : i + HOUSEKEEPING_CHUNK]])
        if now_ms() - self._swept_at >= self.settings.runtime.dormant_sweep_interval_s * 1000:
            self._swept_at = now_ms()
            swept = await dormancy.sweep_due(self.client)
            if swept.swept or swept.live:
                log.info("dormant_sessions_swept", **swept.model_dump())

    async def _housekeep_chunk(self, sessions: list[Session]) -> None:
        held = await renew_all(self.client, [s.lease for s in sessions], [s.sid for s in sessions if s.state.running],
                               keys.RUNTIME_LIVE, now_ms())
        for session, ok in zip(sessions, held, strict=True):
            if not ok:
                log.warning("lease_lost", session_id=session.sid)
                await self._drop(session)
            elif session.state.stop_requested:
                await self.close(session.sid, session.state.stop_requested)
            elif session.state.idle_for() > self.settings.runtime.idle_s:
                await self.close(session.sid, "idle")
        live = [s.sid for s in sessions if not s.state.closed and not s.lease.lost]
        for entry in await self.reader.claim_foreign(live, self.settings.bus.claim_idle_ms) if live else []:
            holder = self.sessions.get(entry.session_id)
            if holder is not None and holder.deliver(entry):
                log.info("inbox_entry_reclaimed", session_id=entry.session_id, entry_id=entry.entry_id)

    async def _orphan_loop(self) -> None:
        """Resume sessions whose worker died (no lease, stale renewal): the run it had goes on here.
        Lease.acquire is atomic, so when several workers try, exactly one wins. Not past this worker's
        share: a dead worker's sessions spread over the survivors instead of all going to the first."""
        while not self._stopping:
            await asyncio.sleep(max(self.settings.runtime.lease_ms / 1000, 1.0))
            if self.disk is not None and not self.disk.ok:
                continue  # orphans are resumed once the disk takes writes again
            try:
                stale = await self.client.zrangebyscore(keys.RUNTIME_LIVE, "-inf", now_ms() - 2 * self.settings.runtime.lease_ms)
                for raw in stale:
                    sid = text(raw) if isinstance(raw, bytes | str) else str(raw)
                    if sid in self.sessions or await self.client.exists(keys.lease(sid)):
                        continue
                    if await over_share(self.client, len(self.sessions), self._live_worker_ms):
                        log.info("orphans_left_to_peers", held=len(self.sessions))
                        break  # the rest to the peers' scans (or to this one's next pass)
                    log.info("resuming_orphaned_session", session_id=sid)
                    await self.on_wake(Wake(session_id=sid, reason="resume"))
                    if sid not in self.sessions:
                        await self.client.zrem(keys.RUNTIME_LIVE, sid)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                log.exception("orphan_scan_failed")

    # ------------------------------------------------------------ going dormant

    async def _drop(self, session: Session) -> None:
        """The lease was taken: the session stops at once (session.py `drop`), its inbox is no longer read."""
        self.reader.remove(session.sid)
        self.sessions.pop(session.sid, None)
        await session.drop()
        self.reader.remove(session.sid)  # a registration (wake_timing.py `start_reading`) that ended meanwhile
        gcpolicy.released()

    def _request_close(self, sid: str, reason: str) -> None:
        task = asyncio.ensure_future(self.close(sid, reason))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self, sid: str, reason: str) -> None:
        """The session goes dormant (session.py `close`); its inbox is read no more, first: what is unread
        stays for the next holder."""
        async with self._locks.hold(sid):
            session = self.sessions.pop(sid, None)
            if session is None:
                return
            self.reader.remove(sid)
            try:
                await session.close(reason)
            finally:
                self.reader.remove(sid)  # a registration (wake_timing.py `start_reading`) that ended meanwhile
                gcpolicy.released()  # its state is frozen cyclic garbage now: a wave of closes brings a full pass

    async def shutdown(self) -> None:
        log.info("worker_stopping", sessions=len(self.sessions))
        self._stopping = True  # the loops also check this: a cancel swallowed by a timeout race
        for t in self._tasks:  # (wait_for / redis-py) must not keep a loop alive
            t.cancel()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=STOP_WAIT_S)
            if pending:
                log.warning("worker_loops_not_stopped", tasks=[t.get_name() for t in pending])
        await self.reader.close()
        log.info("worker_loops_stopped")
        for sid in list(self.sessions):
            with contextlib.suppress(Exception):
                await self.close(sid, "shutdown")
        await self.sender.close()
        gcpolicy.defer_while(None)
        log.info("worker_stopped")

    def snapshot(self) -> dict[str, Any]:
        return {sid: {"running": s.state.running, "fence": s.lease.fence} for sid, s in self.sessions.items()}
