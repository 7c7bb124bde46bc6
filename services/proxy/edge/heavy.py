"""Bounds on the heavy requests in flight: exports (a whole session read, gzipped into a temporary
file, then streamed) and forks (a session's files laid out again). Each takes disk, CPU and I/O from
every other user of the proxy's host: 16 exports at once took another user's round trip from 3 to
101 ms. Per proxy process, at most `per_process` of a kind run at once and at most `per_user` of one
user; past either the request gets 429 with Retry-After at once (no queue holding a connection) and
nothing is done (docs/architecture.md "Limits on hostile input").

An export keeps its slot until its stream ends (the temporary file is disk it holds meanwhile).
One event loop, no awaits between the check and the count: the counts need no lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from services.proxy.edge.errors import ApiError

RETRY_AFTER_S = 2


@dataclass
class Gate:
    kind: str  # "exports", for the message
    per_user: int
    per_process: int
    setting: str  # the variables that set the bounds, for the message
    users: Counter[str] = field(default_factory=Counter)
    total: int = 0

    def take(self, user: str) -> Slot:
        """A slot for `user`, or ApiError 429 (Retry-After) past a bound; release it exactly once."""
        if self.users[user] >= self.per_user:
            raise ApiError(429, f"at most {self.per_user} {self.kind} of one user run at once ({self.setting}); "
                           "retry when one has finished", headers={"Retry-After": str(RETRY_AFTER_S)})
        if self.total >= self.per_process:
            raise ApiError(429, f"the server runs {self.per_process} {self.kind} at once already ({self.setting}); "
                           "retry shortly", headers={"Retry-After": str(RETRY_AFTER_S)})
        self.users[user] += 1
        self.total += 1
        return Slot(self, user)


@dataclass
class Slot:
    gate: Gate
    user: str
    held: bool = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.gate.total -= 1
            self.gate.users[self.user] -= 1
            if self.gate.users[self.user] <= 0:
                del self.gate.users[self.user]


@contextmanager
def held(gate: Gate, user: str) -> Iterator[Slot]:
    slot = gate.take(user)
    try:
        yield slot
    finally:
        slot.release()


_gates: dict[tuple[str, int, int], Gate] = {}


def gate(kind: str, per_user: int, per_process: int, setting: str) -> Gate:
    """The process's gate for `kind` with these bounds (made once)."""
    key = (kind, per_user, per_process)
    if key not in _gates:
        _gates[key] = Gate(kind, per_user, per_process, setting)
    return _gates[key]


def released_after(items: Iterator[bytes], slot: Slot) -> Iterator[bytes]:
    """`items`, then the slot released (at the end, or when the client leaves and the stream is closed)."""
    try:
        yield from items
    finally:
        slot.release()
