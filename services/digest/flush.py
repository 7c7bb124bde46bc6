"""Flush on request (causal order, shared/streams/causal.py): a `FlushRequest{upto}` sends the session's pending
digests of the changes numbered up to `upto` at once instead of after the debounce, then appends
`ChangesSettled{upto}` to the inbox, after them. A change not handled yet (still on the changes stream)
leaves the request owed (`keys.digest_flush`): the builder's `after_change` settles it once handled.

Only what the waiting prompt needs goes out early: a ref whose newest change came after `upto` gets a
digest up to the last revision numbered up to `upto`; the rest follows after its debounce, from there.
"""

from __future__ import annotations

import structlog

from services.digest.builder import SOURCE, DigestBuilder, source_id
from services.digest.in_flight import release_settled
from services.digest.revisions import RefState
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.streams.causal import FlushRequest
from shared.contracts.streams.inbox import ChangesSettled, Injection
from shared.redis import keys
from shared.streams import causal
from shared.streams.inbox import append

log = structlog.get_logger()
OWED_TTL_S = 60  # past the runtime's wait (GAMMA_CAUSAL_WAIT_MS, at most 60 s) nobody waits any more

# Keep the highest watermark owed.
_OWE_MAX = """
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > v then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) end
return 1
"""
# Forget the debt once settled, unless a higher one was owed meanwhile.
_PAID = """
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
if v <= tonumber(ARGV[1]) then redis.call('DEL', KEYS[1]) end
return 1
"""


class Flusher:
    def __init__(self, builder: DigestBuilder) -> None:
        self.b = builder
        self._r = builder._r
        self._owe = self._r.register_script(_OWE_MAX)
        self._paid = self._r.register_script(_PAID)
        builder.after_change = self.after_change

    async def on_request(self, request: FlushRequest) -> None:
        await self.settle(request.session_id, request.upto)

    async def after_change(self, sid: str, owed: str | None) -> None:
        """`owed`: `keys.digest_flush` as the change's save read it, under the session's lock (a request
        owed after that saw the change handled)."""
        if owed is not None and owed.isdigit():
            await self.settle(sid, int(owed))

    async def settle(self, sid: str, upto: int) -> bool:
        """True when every change up to `upto` is settled and `ChangesSettled` is in the inbox."""
        async with self.b.locked(sid):
            by_ref: dict[str, set[int]] = {}
            for seq, ref in await causal.in_flight(self._r, sid, upto):
                by_ref.setdefault(ref, set()).add(seq)
            live = bool(await self._r.exists(keys.lease(sid)))
            for ref, seqs in by_ref.items():
                state = await self.b.revisions.load(sid, ref)
                if state is not None:
                    await self._flush_ref(sid, ref, state, seqs, live)
            if await causal.in_flight(self._r, sid, upto):
                await self._owe(keys=[keys.digest_flush(sid)], args=[upto, OWED_TTL_S])
                log.info("digest_flush_owed", session_id=sid, upto=upto)
                return False
            await append(self._r, ChangesSettled(session_id=sid, upto=upto))
            await self._paid(keys=[keys.digest_flush(sid)], args=[upto])
        return True

    async def _flush_ref(self, sid: str, ref: str, state: RefState, seqs: set[int], live: bool) -> None:
        last = max(state.sent, default=None)
        targets = [r for r, n in state.notes.items() if n.seq in seqs and (last is None or r > last)]
        carried = state.carry is not None and state.carry.sent_in is None and bool(seqs & set(state.carry.seqs))
        if not targets and not carried:
            # Handled and out already (its release was lost), or not handled yet: release what is settled.
            await release_settled(self._r, sid, ref, state)
            return
        target = max(targets, default=state.current)
        if not live:
            await self.b._to_manifest(sid, ref, state)  # went dormant: the wake's manifest carries it
        elif target >= state.current:
            await self.b._send(sid, ref, state)
        else:
            await self._send_upto(sid, ref, state, target)
        await self.b._save(sid, ref, state)

    async def _send_upto(self, sid: str, ref: str, state: RefState, target: int) -> None:
        """A digest from `seen` to `target` < current (a change after the prompt stays due)."""
        view = state.model_copy(deep=True)
        view.current = target
        view.notes = {r: n for r, n in state.notes.items() if r <= target}
        view.deleted = view.notes[target].deleted if target in view.notes else False
        digest = await self.b._digest(sid, ref, view)
        if digest is None:
            return
        content, from_revision = digest
        await append(self._r, Injection(
            session_id=sid, injection=RuntimeInjection(kind="artifact_update", content=content),
            source=SOURCE, source_id=source_id(ref, target), ref=ref,
            from_revision=from_revision, to_revision=target,
        ))
        state.sent.append(target)
        if state.carry is not None and state.carry.sent_in is None:
            state.carry.sent_in = target
        log.info("digest_flushed_upto", session_id=sid, ref=ref, to_revision=target, current=state.current)
