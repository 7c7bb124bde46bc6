"""Remote notifications: `POST /notifications` and the `gamma:notifications` stream (same body)."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, TypeAdapter

from shared.contracts.base import CamelContract, Contract
from shared.contracts.records.connectors import CALL_ID, CONNECTOR_NAME, MAX_RESULT_CHARS

NOTIFICATION_ID = r"^[A-Za-z0-9_.:-]{1,200}$"


class ImportCompletedPayload(CamelContract):
    import_id: str = Field(max_length=200)
    source_ref: str = Field(max_length=2000)
    output_refs: list[str] = Field(default_factory=list, max_length=100)


class RenderCompletedPayload(CamelContract):
    render_id: str = Field(max_length=200)
    ref: str = Field(max_length=2000)
    output_refs: list[str] = Field(default_factory=list, max_length=100)
    status: Literal["succeeded", "failed"] = "succeeded"
    error: str | None = Field(None, max_length=2000)


class ExportCompletedPayload(CamelContract):
    export_id: str = Field(max_length=200)
    ref: str = Field(max_length=2000)
    format: str = Field(max_length=20)
    output_ref: str = Field(max_length=2000)


class ApprovalResolvedPayload(CamelContract):
    approval_id: str = Field(max_length=200)
    decision: Literal["approved", "rejected"]
    subject: str = Field(max_length=2000)
    comment: str | None = Field(None, max_length=4000)


class ConnectorCompletedPayload(CamelContract):
    """The end of a connector call first answered `accepted` (docs/architecture.md "Connectors")."""

    connector: str = Field(pattern=CONNECTOR_NAME)
    call_id: str = Field(pattern=CALL_ID)
    status: Literal["succeeded", "failed"] = "succeeded"
    content: str = Field(max_length=MAX_RESULT_CHARS)


class _Notification(Contract):
    id: str = Field(pattern=NOTIFICATION_ID)


class ImportCompleted(_Notification):
    type: Literal["import.completed"]
    payload: ImportCompletedPayload


class RenderCompleted(_Notification):
    type: Literal["render.completed"]
    payload: RenderCompletedPayload


class ExportCompleted(_Notification):
    type: Literal["export.completed"]
    payload: ExportCompletedPayload


class ApprovalResolved(_Notification):
    type: Literal["approval.resolved"]
    payload: ApprovalResolvedPayload


class ConnectorCompleted(_Notification):
    type: Literal["connector.completed"]
    payload: ConnectorCompletedPayload


ExternalNotification = Annotated[
    ImportCompleted | RenderCompleted | ExportCompleted | ApprovalResolved | ConnectorCompleted,
    Field(discriminator="type")
]
NOTIFICATION_ADAPTER: TypeAdapter[ExternalNotification] = TypeAdapter(ExternalNotification)
# Every notification type, in union order (the urgency policy's configuration is checked against it).
NOTIFICATION_TYPES: tuple[str, ...] = tuple(
    get_args(m.model_fields["type"].annotation)[0] for m in (ImportCompleted, RenderCompleted, ExportCompleted,
                                                           ApprovalResolved, ConnectorCompleted))


class NotificationSubmit(Contract):
    session_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    notification: ExternalNotification


class NotificationAccepted(Contract):
    id: str
    session_id: str
    duplicate: bool
    status: Literal["delivered", "pending", "consumed"]
