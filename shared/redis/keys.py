"""Redis key and stream names. Per-session keys carry the `{sid}` hash tag (one Cluster slot)."""

from __future__ import annotations

import hashlib

WAKE = "gamma:runtime:wake"
LIFECYCLE = "gamma:lifecycle"
ARTIFACT_CHANGES = "gamma:artifacts:changes"
INJECTIONS_RECORDED = "gamma:injections:recorded"
COMPACTION_REQUESTS = "gamma:compaction:requests"
NOTIFICATIONS = "gamma:notifications"
DEADLETTER = "gamma:deadletter"
# Causal order (shared/streams/causal.py): the runtime asks the digest to flush a session's pending digests now.
DIGEST_FLUSH = "gamma:digest:flush"
# Global counter numbering the artifact changes the proxy acknowledges (their `seq`).
CHANGE_SEQ = "gamma:changes:seq"

# The runtime's group on the wake stream and the inboxes (shared/redis/topology.py `group_of("runtime")`).
RUNTIME_GROUP = "runtime"


def _s(sid: str) -> str:
    return "gamma:{" + sid + "}"


def inbox(sid: str) -> str:
    return _s(sid) + ":inbox"


def inbox_ring(sid: str) -> str:
    """The sharded Pub/Sub channel rung after each inbox append on a cluster (shared/streams/inbox_rings.py)."""
    return _s(sid) + ":inbox-ring"


def events(sid: str) -> str:
    return _s(sid) + ":events"


def session_row(sid: str) -> str:
    return _s(sid) + ":session"


def lease(sid: str) -> str:
    return _s(sid) + ":lease"


def legacy_fence(sid: str) -> str:
    """The fence's own key before it became the row's `FENCE_FIELD` (a key costs ~100 B of Redis for
    every dormant session, a field ~10 B). Readers take the larger of the two; the lease script and the
    dormancy sweep fold it into the row and delete it."""
    return _s(sid) + ":fence"


def dormant_write(sid: str) -> str:
    return _s(sid) + ":dormant-write"


def reply(sid: str, request_id: str) -> str:
    return _s(sid) + ":reply:" + request_id


def revisions(sid: str) -> str:
    """Hash: ref -> JSON {seen, current} kept by the digest builder."""
    return _s(sid) + ":revisions"


def revision_numbers(sid: str) -> str:
    """Hash: ref -> the last revision the lease holder numbered a file change with (shared/redis/revnum.py)."""
    return _s(sid) + ":revnum"


def _notification_key_id(notification_id: str) -> str:
    """A producer's id never becomes part of a key as is: `Y:state` once named the state hash of id `Y`.
    The sha256 hex digest has no `:`, so no id can reach another id's keys (or the `:state` suffix)."""
    return hashlib.sha256(notification_id.encode()).hexdigest()


def notification(sid: str, notification_id: str) -> str:
    """The immutable record. `ntf`, not the `notification` prefix of the legacy raw-id keys, so the
    startup migration (services/notifications/migrate.py) tells legacy keys from current ones."""
    return _s(sid) + ":ntf:" + _notification_key_id(notification_id)


def notifications_pending(sid: str) -> str:
    return _s(sid) + ":notifications:pending"


def user_sessions(user: str) -> str:
    return "gamma:user:" + user + ":sessions"


def health(service: str) -> str:
    return "gamma:health:" + service


def once(scope: str, message_id: str) -> str:
    return "gamma:once:" + scope + ":" + message_id


def inbox_stream_sid(stream: str) -> str:
    """The session id inside `gamma:{sid}:inbox`."""
    return stream[len("gamma:{") : stream.index("}")]


def running(sid: str) -> str:
    """Set by the lease holder while a run is active (the session view's `running`)."""
    return _s(sid) + ":running"


def notification_state(sid: str, notification_id: str) -> str:
    """Hash kept by notifications next to the immutable record: status, delivery and recorded parts."""
    return notification(sid, notification_id) + ":state"


def legacy_notification_pattern() -> str:
    """SCAN pattern of the legacy raw-id notification keys (record and `:state`; migrate.py moves them)."""
    return "gamma:{*}:notification:*"


def legacy_notification_prefix(sid: str) -> str:
    return _s(sid) + ":notification:"


def digest_lock(sid: str) -> str:
    """Serialises the digest builder's read-modify-write of one session's revisions and manifest."""
    return _s(sid) + ":digest-lock"


def digest_handled(sid: str) -> str:
    """Hash: the ids of the session's artifact changes the digest has handled (a redelivered entry is
    skipped), expiring `DIGEST_HANDLED_TTL_S` after the last one. One key per session, not one global
    `once("digest-change", id)` key per change (~90 B each plus an expires entry, docs/integration.md "Dormant sessions in Redis")."""
    return _s(sid) + ":digest-handled"


DIGEST_HANDLED_TTL_S = 7 * 24 * 3600


def digest_live(sid: str) -> str:
    """Hash: the fence of the last `SessionLive` the digest handled and when (`fence`, `since`)."""
    return _s(sid) + ":digest-live"


# Sorted set of JSON [sid, ref] scored by the time its debounced live digest is due.
DIGEST_DUE = "gamma:digest:due"

# Sorted set: session id scored by the last lease renewal (ms) of its runtime holder. A session whose
# score is older than its lease and that has no lease lost its worker; any runtime resumes it.
RUNTIME_LIVE = "gamma:runtime:live"
# Sorted set: runtime worker id scored by its last housekeeping pass (ms): the live workers, for each
# worker's fair share of the sessions (services/runtime/hosting/share.py). Members a minute old are dropped.
RUNTIME_WORKERS = "gamma:runtime:workers"

# Sorted set: dormant session id scored by when its retention ends (ms); the runtime's sweep then drops
# the session's events stream and drained inbox (shared/redis/dormancy.py, docs/integration.md).
DORMANT_DUE = "gamma:dormant:due"

# Session-row field: the fence, HINCRBY by the runtime for every lease it takes (services/runtime/live/lease.py).
# Fences only grow, across wakes: stale holders and the digest's `SessionLive` checks compare against it.
FENCE_FIELD = "fence"
# Session-row field set by the sweep: the id of the last events-stream entry it deleted, so the SSE
# route tells a client whose Last-Event-ID is older that its history is gone (a `reset` event).
EVENTS_SWEPT_FIELD = "events_swept"
# Session-row field set by the sweep: the model usage totals folded out of `model_usage(sid)`
# ("requests,input,cached,output,reasoning"; shared/redis/dormancy.py).
USAGE_FIELD = "usage"


def compaction_done(sid: str, request_id: str) -> str:
    """Set by the compaction service in the same script that sends the request's CompactionReady."""
    return _s(sid) + ":compaction-done:" + request_id


def compaction_working(sid: str, request_id: str) -> str:
    """The compaction service's lock on one request while its model call runs (renewed)."""
    return _s(sid) + ":compaction-working:" + request_id


def model_usage(sid: str) -> str:
    """Hash of the session's model usage totals (requests, input/cached/output/reasoning tokens), kept
    by the runtime with each model_request event; GET /sessions/{id} reports its cache-hit ratio."""
    return _s(sid) + ":model-usage"


def spend(sid: str) -> str:
    """Hash of the session's spending: every model request's tokens and cost, in total, per model and
    per kind (agent, subagent, compaction), and its own budget caps (shared/costs/spend.py). Kept while the
    session lives, dormant too (a few hundred bytes); erased with it."""
    return _s(sid) + ":spend"


def spend_counted(sid: str, token: str) -> str:
    """Set once the usage rows an inbox entry carried (a CompactionReady's) are counted (expires)."""
    return _s(sid) + ":spend-counted:" + token


def user_spend(user: str) -> str:
    """Hash of one user's spending over all their sessions, laid out as `spend(sid)` (shared/costs/spend.py);
    kept when a session is deleted (its spending still counts against the user's cap)."""
    return "gamma:user:" + user + ":spend"


def changes_in_flight(sid: str) -> str:
    """Sorted set of the artifact changes the proxy acknowledged that the digest has not yet delivered
    or dismissed: member `"{seq} {ref}"`, score `seq` (shared/streams/causal.py). Empty (so gone) when settled."""
    return _s(sid) + ":changes-in-flight"


def digest_flush(sid: str) -> str:
    """The highest flush watermark the digest still owes the session (a change not handled yet)."""
    return _s(sid) + ":digest-flush"


# Session deletion (shared/redis/deletion.py, docs/architecture.md "Session lifecycle"). Sorted set: session
# id scored by when its (next) erase pass is due; an id leaves it once erased after the grace period.
SESSIONS_DELETING = "gamma:sessions:deleting"
# Sorted set: session id scored by when it was erased (the tombstones); trimmed past
# GAMMA_DELETED_RETENTION_S. Global on purpose: every key under the session's `{sid}` tag is erased.
SESSIONS_DELETED = "gamma:sessions:deleted"
# Session-row `status` while the session is being deleted (services/proxy/dormant/erase.py).
STATUS_DELETING = "deleting"


# Connectors (docs/architecture.md "Connectors"): the registry (name -> Connector JSON) and its change
# counter share one slot; each connector's call stream is on its own.
CONNECTORS = "gamma:{connectors}:registry"
CONNECTORS_VERSION = "gamma:{connectors}:version"
# MCP connector credentials, Fernet-encrypted (shared/mcp/mcp_secrets.py): name -> token
MCP_CREDENTIALS = "gamma:{connectors}:mcp-credentials"
CONNECTOR_GROUP = "connector"


def connector_calls(name: str) -> str:
    return "gamma:connectors:{" + name + "}:calls"


def connector_call(sid: str, call_id: str) -> str:
    """One dispatched call: its connector, tool, deadline and (set once) its outcome."""
    return _s(sid) + ":connector-call:" + call_id


def agui_run(sid: str, key: str) -> str:
    """An AG-UI run's record (services/proxy/routes/agui.py): its prompt and start cursor, under the
    Idempotency-Key or the run id (hashed: client-chosen text is never a key name, docs/architecture.md
    "Limits on hostile input")."""
    return _s(sid) + ":agui:" + hashlib.sha256(key.encode()).hexdigest()
