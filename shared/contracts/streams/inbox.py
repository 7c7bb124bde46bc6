"""`gamma:{sid}:inbox`: everything that enters a live session, discriminated by `type`.

Producers: proxy (prompts, UI/file/document writes, stop, compact), notifications (injections,
barrier), digest (artifact injections, changes settled), compaction (results). Consumer: the lease holder.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from shared.contracts.base import TRACEPARENT, Contract, new_id
from shared.contracts.records.blobref import BLOB_NAME, SHA256
from shared.contracts.records.client import PromptClientContext
from shared.contracts.records.connectors import CALL_ID, CONNECTOR_NAME, MAX_RESULT_CHARS
from shared.contracts.records.injection import InjectionSource, RuntimeInjection
from shared.contracts.records.messages import ImageRef
from shared.contracts.records.spend import UsageRow

# interrupt: abort the active run, then start a new one with this message (docs/integration.md "Abort and interrupt").
OnBusy = Literal["steer", "follow_up", "reject", "interrupt"]
RUN_ID = r"^run_[A-Za-z0-9_-]{1,60}$"
ENTRY_ID = r"^[A-Za-z0-9_-]{1,64}$"  # a transcript entry's id


class _InboxBase(Contract):
    id: str = Field(default_factory=lambda: new_id("m_"))
    session_id: str
    # The trace the producer was in (W3C); the runtime handles the entry in it (shared/telemetry/tracing.py).
    traceparent: str | None = Field(None, pattern=TRACEPARENT)


class AttachedFile(Contract):
    """A file the user attached that is not an image: named to the agent (path, type, size) in a
    trusted note, so it can `read` it."""

    path: str = Field(min_length=1, max_length=1024)
    media_type: str = Field(max_length=100)
    bytes: int = Field(ge=0)


class UserPrompt(_InboxBase):
    type: Literal["user_prompt"] = "user_prompt"
    prompt_id: str = Field(default_factory=lambda: new_id("p_"))
    message: str
    client_context: PromptClientContext | None = None
    on_busy: OnBusy = "steer"
    # Causal order (shared/streams/causal.py): the newest artifact change still in flight when the proxy
    # accepted the prompt; the runtime holds the prompt until the digest settled every change up to it.
    after_seq: int | None = Field(None, ge=1)
    # Only for the run the sender saw (Codex's expectedTurnId): the runtime refuses the prompt (409
    # on `request_id`, nothing queued) when that run has ended. Set together with `request_id`.
    expected_run_id: str | None = Field(None, pattern=RUN_ID)
    request_id: str | None = None
    # Attachments, validated and (images) stored by the proxy (shared/media/images.py): image parts of the
    # user message, and the other files named in a note before it.
    images: list[ImageRef] | None = Field(None, max_length=100)
    files: list[AttachedFile] | None = Field(None, max_length=100)


class Injection(_InboxBase):
    """A trusted runtime injection. `source_id` makes recording idempotent."""

    type: Literal["injection"] = "injection"
    injection: RuntimeInjection
    source: InjectionSource
    source_id: str
    ref: str | None = None
    from_revision: int | None = None
    to_revision: int | None = None


class UiUpdate(_InboxBase):
    """A client Yjs update (base64 V1) to merge into SessionUIState."""

    type: Literal["ui_update"] = "ui_update"
    request_id: str = Field(default_factory=lambda: new_id("r_"))
    update: str
    snapshot: dict[str, Any] | None = None


class FileWrite(_InboxBase):
    """A live workspace PUT. The bytes are not in the entry: the proxy wrote them to the content blob
    `sessions/{sid}/.blobs/{blob}` (shared/storage/blobs.py); the runtime copies the blob into the
    workspace when its SHA-256 matches, and answers 410 when it is gone (the proxy gave up)."""

    type: Literal["file_write"] = "file_write"
    request_id: str = Field(default_factory=lambda: new_id("r_"))
    path: str
    blob: str = Field(pattern=BLOB_NAME)
    sha256: str = Field(pattern=SHA256)
    size: int = Field(ge=0)
    digest: str | None = None


class DocumentEdit(_InboxBase):
    type: Literal["document_edit"] = "document_edit"
    request_id: str = Field(default_factory=lambda: new_id("r_"))
    doc: str
    op: Literal["put", "patch"]
    document: dict[str, Any]
    if_match: int | None = None


class FileDelete(_InboxBase):
    """A live workspace DELETE: the runtime, which owns live files, removes the file and answers
    `{path, deleted, revision}` (404 when there is no such file, 409 for a directory). `recursive`:
    a directory is removed with its tree, within the workspace's bounds, and the answer adds
    `files: [{path, revision}]`, the regular files that went with it."""

    type: Literal["file_delete"] = "file_delete"
    request_id: str = Field(default_factory=lambda: new_id("r_"))
    path: str
    recursive: bool = False


class DocumentDelete(_InboxBase):
    """A live document DELETE (409 on a stale `if_match`, 404 when there is no such deck)."""

    type: Literal["document_delete"] = "document_delete"
    request_id: str = Field(default_factory=lambda: new_id("r_"))
    doc: str
    if_match: int | None = None


class Barrier(_InboxBase):
    """Sent by notifications after its pending deliveries for one wake."""

    type: Literal["barrier"] = "barrier"
    wake_id: str
    source: Literal["notifications"] = "notifications"


class ChangesSettled(_InboxBase):
    """Sent by the digest after a `FlushRequest`: every artifact change of the session numbered up to
    `upto` is delivered (its `artifact_update` precedes this entry in the inbox) or dismissed."""

    type: Literal["changes_settled"] = "changes_settled"
    upto: int = Field(ge=1)


class CompactionReady(_InboxBase):
    type: Literal["compaction_ready"] = "compaction_ready"
    request_id: str
    summary: str = ""
    first_kept_entry_id: str
    upto_entry_id: str
    tokens_before: int = 0
    details: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    # The summary calls' usage (a failed one too), recorded by the runtime with the session's others
    # (services/runtime/runs/spend.py; docs/costs.md). At most a history and a turn-prefix call.
    usage: list[UsageRow] = Field(default_factory=list, max_length=8)


class Compact(_InboxBase):
    """POST /compact: compact now, with optional custom instructions."""

    type: Literal["compact"] = "compact"
    request_id: str = Field(default_factory=lambda: new_id("r_"))
    instructions: str | None = None


class Stop(_InboxBase):
    """POST /suspend: persist, release the lease, go dormant."""

    type: Literal["stop"] = "stop"
    reason: str = "suspend"
    request_id: str = Field(default_factory=lambda: new_id("r_"))


class Abort(_InboxBase):
    """POST /abort: end the active run (its id must be `expected_run_id` when given)."""

    type: Literal["abort"] = "abort"
    request_id: str = Field(default_factory=lambda: new_id("r_"))
    expected_run_id: str | None = Field(None, pattern=RUN_ID)


class Rewind(_InboxBase):
    """POST /rewind, `edit_of`, a branch switch: abort the active run, restore the workspace,
    documents and todo of `entry_id`, and move the transcript's leaf there (shared/history/rewind.py)."""

    type: Literal["rewind"] = "rewind"
    request_id: str = Field(default_factory=lambda: new_id("r_"))
    entry_id: str = Field(pattern=ENTRY_ID)
    reason: Literal["rewind", "edit", "switch"] = "rewind"
    # An edit: the edited user message, whose "prompt" snapshot (the state it was sent in) is restored
    # when nothing is kept for `entry_id` itself (the first message's parent precedes every snapshot).
    edited_id: str | None = Field(None, pattern=ENTRY_ID)


class ConnectorResult(_InboxBase):
    """A connector's answer to one tool call (docs/architecture.md "Connectors"), appended by the
    notifications service once per call: data for a tool result, never an injection."""

    type: Literal["connector_result"] = "connector_result"
    call_id: str = Field(pattern=CALL_ID)
    connector: str = Field(pattern=CONNECTOR_NAME)
    status: Literal["ok", "error", "accepted"]
    content: str = Field(max_length=MAX_RESULT_CHARS)


class ModelChange(_InboxBase):
    """PATCH /sessions/{id} changed the session's model (the row already holds the new one): record it
    in the transcript and use it from the next model call on (docs/models.md "Sessions"). The fields
    are http.ModelConfig's, settled and checked against the catalogue by the proxy."""

    type: Literal["model_change"] = "model_change"
    request_id: str = Field(default_factory=lambda: new_id("r_"))
    name: str = Field(max_length=100)
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    api: Literal["responses", "chat"]
    context_window: int | None = Field(None, ge=1024, le=10_000_000)


InboxMessage = Annotated[
    UserPrompt | Injection | UiUpdate | FileWrite | DocumentEdit | Barrier | CompactionReady | Compact | Stop
    | ChangesSettled | FileDelete | DocumentDelete | Abort | Rewind | ConnectorResult | ModelChange,
    Field(discriminator="type"),
]
INBOX_ADAPTER: TypeAdapter[InboxMessage] = TypeAdapter(InboxMessage)


class InboxReply(Contract):
    """Read-your-writes answer for a forwarded request, pushed on `gamma:{sid}:reply:{request_id}`."""

    request_id: str
    status: int = 200
    body: dict[str, Any] = Field(default_factory=dict)
