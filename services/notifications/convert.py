"""External notification -> runtime injections (docs/integration.md "Injections").

Pure functions. One notification can become several injections; the n-th part after the first gets
`source_id = "{id}#{n}"` (docs/integration.md "Injections"), so the runtime records each part once and
notifications can tell when every part of a notification is in the transcript.
"""

from __future__ import annotations

from shared.contracts.inbox import Injection
from shared.contracts.injection import InjectionKind, RuntimeInjection
from shared.contracts.notifications import (
    ApprovalResolved,
    ConnectorCompleted,
    ExportCompleted,
    ExternalNotification,
    ImportCompleted,
    RenderCompleted,
)
from shared.trusted_blocks import lines, quoted, render

SOURCE = "notification"


def part_source_id(notification_id: str, index: int) -> str:
    return notification_id if index == 0 else f"{notification_id}#{index}"


def parse_source_id(source_id: str) -> tuple[str, int]:
    """Inverse of `part_source_id`. Notification ids never contain `#` (NOTIFICATION_ID)."""
    nid, sep, rest = source_id.partition("#")
    if not sep:
        return nid, 0
    if not rest.isdigit():
        raise ValueError(f"bad notification part in {source_id!r}")
    return nid, int(rest)


def _block(kind: InjectionKind, attrs: dict[str, str | None], body: list[str]) -> str:
    return render(kind, attrs, "\n".join("  " + line for line in body if line))


def _refs(refs: list[str]) -> str:
    return ", ".join(refs) if refs else "none"


def _import(n: ImportCompleted) -> list[tuple[RuntimeInjection, str | None]]:
    p = n.payload
    parts: list[tuple[RuntimeInjection, str | None]] = [
        (
            RuntimeInjection(
                kind="system_update",
                content=_block(
                    "system_update",
                    {"source": "import", "import_id": p.import_id},
                    [
                        f"The import of {p.source_ref} finished.",
                        f"Outputs: {_refs(p.output_refs)}.",
                        "Evaluate the imported content and continue the task that needed it.",
                    ],
                ),
            ),
            None,
        )
    ]
    # Each output is a new task artifact the agent has not read: one artifact_update per ref.
    for ref in p.output_refs:
        parts.append(
            (
                RuntimeInjection(
                    kind="artifact_update",
                    content=_block(
                        "artifact_update",
                        {"ref": ref},
                        [f"The import {p.import_id} wrote this artifact from {p.source_ref}.", "Read it before you use it."],
                    ),
                ),
                ref,
            )
        )
    return parts


def _render(n: RenderCompleted) -> list[tuple[RuntimeInjection, str | None]]:
    p = n.payload
    if p.status == "failed":
        # A failed render changed nothing: it is a platform state change to act on, not an artifact change.
        return [
            (
                RuntimeInjection(
                    kind="system_update",
                    content=_block(
                        "system_update",
                        {"source": "render", "render_id": p.render_id, "ref": p.ref},
                        [f"The render of {p.ref} failed: {p.error or 'no reason given'}.",
                         "Investigate, retry, or tell the user."],
                    ),
                ),
                None,
            )
        ]
    return [
        (
            RuntimeInjection(
                kind="artifact_update",
                content=_block(
                    "artifact_update",
                    {"ref": p.ref},
                    [f"The render {p.render_id} of {p.ref} finished.", f"Rendered outputs: {_refs(p.output_refs)}.",
                     "Inspect the rendered result before you report completion."],
                ),
            ),
            p.ref,
        )
    ]


def _export(n: ExportCompleted) -> list[tuple[RuntimeInjection, str | None]]:
    p = n.payload
    return [
        (
            RuntimeInjection(
                kind="artifact_update",
                content=_block(
                    "artifact_update",
                    {"ref": p.output_ref},
                    [f"The {p.format} export {p.export_id} of {p.ref} finished.", f"The export is at {p.output_ref}."],
                ),
            ),
            p.output_ref,
        )
    ]


def _approval(n: ApprovalResolved) -> list[tuple[RuntimeInjection, str | None]]:
    p = n.payload
    body = [f"The approval request {p.approval_id} for {p.subject} was {p.decision}."]
    if p.comment:
        body.append(f"Reviewer comment: {p.comment}")
    body.append("Continue if approved; otherwise record the rejection and adjust the plan.")
    return [
        (
            RuntimeInjection(
                kind="system_update",
                content=_block("system_update", {"source": "approval", "approval_id": p.approval_id}, body),
            ),
            None,
        )
    ]


def _connector(n: ConnectorCompleted) -> list[tuple[RuntimeInjection, str | None]]:
    """The connector's words are data: quoted and attributed, never the harness's own."""
    p = n.payload
    body = lines(f"The connector {p.connector} finished the call {p.call_id} that it had accepted ({p.status}). "
                 "Its answer, as data:", quoted("connector", p.content))
    content = render("background_result", {"connector": p.connector, "call_id": p.call_id, "status": p.status}, body)
    return [(RuntimeInjection(kind="background_result", content=content), None)]


def to_injections(session_id: str, notification: ExternalNotification) -> list[Injection]:
    """The injections for one notification, in the order the agent should see them."""
    if isinstance(notification, ImportCompleted):
        parts = _import(notification)
    elif isinstance(notification, RenderCompleted):
        parts = _render(notification)
    elif isinstance(notification, ExportCompleted):
        parts = _export(notification)
    elif isinstance(notification, ConnectorCompleted):
        parts = _connector(notification)
    else:
        parts = _approval(notification)
    return [
        Injection(
            session_id=session_id,
            injection=injection,
            source=SOURCE,
            source_id=part_source_id(notification.id, i),
            ref=ref,
        )
        for i, (injection, ref) in enumerate(parts)
    ]
