"""External notification -> runtime injections (docs/integration.md "Injections").

Pure functions. One notification can become several injections; the n-th part after the first gets
`source_id = "{id}#{n}"` (docs/integration.md "Injections"), so the runtime records each part once and
notifications can tell when every part of a notification is in the transcript.

Every field is the sending service's text, not the harness's (docs/architecture.md "Trust
boundaries"): ids, refs and formats are written with `token` (one line, a JSON string unless a plain
word); free text (a subject, a reviewer's comment, an error, a connector's answer) is quoted after a
harness sentence naming it.
"""

from __future__ import annotations

from shared.contracts.records.injection import InjectionKind, RuntimeInjection
from shared.contracts.streams.inbox import Injection
from shared.contracts.streams.notifications import (
    ApprovalResolved,
    ConnectorCompleted,
    ExportCompleted,
    ExternalNotification,
    ImportCompleted,
    RenderCompleted,
)
from shared.trust.trusted_blocks import Part, lines, quoted, render, token

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


def _block(kind: InjectionKind, attrs: dict[str, str | None], body: list[Part]) -> str:
    return render(kind, attrs, lines(*(("  " + p) if isinstance(p, str) else p for p in body if p)))


def _refs(refs: list[str]) -> str:
    return ", ".join(token(r) for r in refs) if refs else "none"


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
                        f"The import of {token(p.source_ref)} finished.",
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
                        [f"The import {token(p.import_id)} wrote this artifact from {token(p.source_ref)}.",
                         "Read it before you use it."],
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
                        [f"The render of {token(p.ref)} failed." + (" The renderer's error:" if p.error else
                                                                     " No reason was given."),
                         quoted("renderer", p.error) if p.error else "",
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
                    [f"The render {token(p.render_id)} of {token(p.ref)} finished.",
                     f"Rendered outputs: {_refs(p.output_refs)}.",
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
                    [f"The {token(p.format)} export {token(p.export_id)} of {token(p.ref)} finished.",
                     f"The export is at {token(p.output_ref)}."],
                ),
            ),
            p.output_ref,
        )
    ]


def _approval(n: ApprovalResolved) -> list[tuple[RuntimeInjection, str | None]]:
    p = n.payload
    body: list[Part] = [f"The approval request {token(p.approval_id)} was {p.decision}. Its subject, as the "
                        "requester wrote it:", quoted("requester", p.subject)]
    if p.comment:
        body += ["The reviewer's comment:", quoted("reviewer", p.comment)]
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
