"""`gamma:digest:flush` (runtime -> digest): causal order of live writes before prompts
(docs/architecture.md "Causal order").

The runtime holds a prompt whose `after_seq` names artifact changes still in flight and asks the
digest to flush the session's pending digests up to that change number at once, instead of after
its debounce; the digest answers with the digests, then `ChangesSettled{upto}` in the inbox.
"""

from __future__ import annotations

from pydantic import Field

from shared.contracts.base import Contract, new_id, now_ms


class FlushRequest(Contract):
    id: str = Field(default_factory=lambda: new_id("fl_"))
    session_id: str
    upto: int = Field(ge=1, description="flush every change of the session numbered up to this `seq`")
    ts: int = Field(default_factory=now_ms)
