"""Connector registration and answers on the notifications service (docs/architecture.md
"Connectors"): the service that already authenticates services (the service token, or an IdP JWT
with the service scope) and already turns a producer's late news into a session's injection.

`PUT/GET/DELETE /connectors/{name}`, `GET /connectors`, and `POST /connectors/{name}/results`: the
answer to one call, settled once (shared/mcp/connectors.py) and appended to the session's inbox as a
`ConnectorResult`; the end of a call answered `accepted` becomes a `connector.completed` notification
(a background_result, stored and delivered like any other)."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError

from services.notifications.delivery import Delivery, NotificationConflict, UnknownSession
from services.notifications.http import _error, refusal
from shared.contracts.http import ErrorBody
from shared.contracts.records.connectors import (
    Connector,
    ConnectorList,
    ConnectorResultAccepted,
    ConnectorResultSubmit,
    ConnectorSpec,
)
from shared.contracts.streams.inbox import ConnectorResult
from shared.contracts.streams.notifications import (
    ConnectorCompleted,
    ConnectorCompletedPayload,
    NotificationSubmit,
)
from shared.mcp import connectors as rules
from shared.mcp import mcp_secrets
from shared.streams.inbox import append
from shared.trust.oidc import BearerVerifier

log = structlog.get_logger()
MAX_REGISTRATION_BYTES = 512 * 1024  # 16 tools of at most 16 KiB of schema each, and their texts
MAX_RESULT_BYTES = 256 * 1024
_ERROR = {"application/json": {"schema": ErrorBody.model_json_schema()}}


def _body(model: Any) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


class ConnectorMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        reg = registry or CollectorRegistry()
        self.registrations = Counter("gamma_connector_registrations_total", "Connector PUT/DELETE",
                                     ["outcome"], registry=reg)
        self.results = Counter("gamma_connector_results_total", "Connector answers by what became of them",
                               ["status"], registry=reg)


async def _json(request: Request, limit: int) -> Any | JSONResponse:
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > limit:
            return _error(413, f"body exceeds the limit of {limit} bytes")
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return _error(422, f"body is not JSON: {exc}")


def _dumped(c: Connector, status: int = 200) -> JSONResponse:
    return JSONResponse(c.model_dump(mode="json"), status_code=status)


class Answers:
    """One connector answer: settle it, then deliver what won (the result, or the accepted call's end)."""

    def __init__(self, client: aioredis.Redis, delivery: Delivery, metrics: ConnectorMetrics) -> None:
        self.r = client
        self.delivery = delivery
        self.metrics = metrics

    async def submit(self, name: str, body: ConnectorResultSubmit) -> JSONResponse:
        sid, cid = body.session_id, body.call_id
        record = await rules.read_call(self.r, sid, cid)
        if record.get("connector") != name:  # another connector's call, or none: nothing to say about it
            return _error(404, f"no call {cid} of connector {name} in session {sid}")
        outcome = record.get("outcome")
        if outcome is None and int(record.get("deadline_ms", "0")) < int(time.time() * 1000):
            _, outcome = await rules.settle(self.r, sid, cid, rules.TIMED_OUT)
        if outcome is not None and outcome != rules.TIMED_OUT and json.loads(outcome)["status"] == "accepted" \
                and body.status != "accepted":
            return await self._complete(name, body)
        mine = json.dumps({"status": body.status, "content": body.content}, separators=(",", ":"))
        won, held = (True, mine) if outcome is None else (False, outcome)
        if outcome is None:
            won, held = await rules.settle(self.r, sid, cid, mine)
        if held == rules.TIMED_OUT:
            log.warning("connector_result_late", session_id=sid, call_id=cid, connector=name)
            return self._answer(cid, "late")
        if held != mine:
            return _error(409, f"call {cid} already has a different answer")
        # The winner appends; a repeat appends again (the runtime takes a call's result once), so an
        # append lost to a crash between the settle and the XADD is made good by the connector's retry.
        await append(self.r, ConnectorResult(session_id=sid, call_id=cid, connector=name, status=body.status,
                                             content=body.content))
        return self._answer(cid, "delivered" if won else "duplicate", 202 if won else 200)

    async def _complete(self, name: str, body: ConnectorResultSubmit) -> JSONResponse:
        payload = ConnectorCompletedPayload(connector=name, call_id=body.call_id, content=body.content,
                                            status="succeeded" if body.status == "ok" else "failed")
        notification = ConnectorCompleted(id=f"connector.{body.call_id}", type="connector.completed", payload=payload)
        try:
            accepted = await self.delivery.submit(NotificationSubmit(session_id=body.session_id,
                                                                     notification=notification))
        except UnknownSession:
            return _error(404, f"unknown session {body.session_id}")
        except NotificationConflict:
            return _error(409, f"call {body.call_id} already has a different answer")
        return self._answer(body.call_id, "duplicate" if accepted.duplicate else "completed",
                            200 if accepted.duplicate else 202)

    def _answer(self, call_id: str, status: str, code: int = 200) -> JSONResponse:
        self.metrics.results.labels(status).inc()
        return JSONResponse(ConnectorResultAccepted(call_id=call_id, status=status).model_dump(),  # type: ignore[arg-type]
                            status_code=code)


Refused = Callable[[Request], Awaitable[JSONResponse | None]]
AUTH: dict[int | str, dict[str, Any]] = {
    401: {"description": "a missing or unknown bearer token, or an invalid JWT", "content": _ERROR},
    403: {"description": "a JWT without the service scope", "content": _ERROR}}


def make_connector_router(client: aioredis.Redis, delivery: Delivery, service_token: str, max_connectors: int,
                          verifier: BearerVerifier | None, metrics: ConnectorMetrics) -> APIRouter:
    router = APIRouter()

    async def refused(request: Request) -> JSONResponse | None:
        return await refusal(request.headers.get("authorization", ""), service_token, verifier)

    _registration_routes(router, client, refused, max_connectors, metrics)
    _result_route(router, Answers(client, delivery, metrics), refused)
    return router


def _registration_routes(router: APIRouter, client: aioredis.Redis, refused: Refused, max_connectors: int,
                         metrics: ConnectorMetrics) -> None:
    auth = AUTH

    @router.put("/connectors/{name}", response_model=Connector, openapi_extra=_body(ConnectorSpec),
                responses={**auth, 413: {"description": "body too large", "content": _ERROR},
                           422: {"description": "a bad field, named in detail; nothing stored", "content": _ERROR}})
    async def put_connector(name: str, request: Request) -> Response:
        if (no := await refused(request)) is not None:
            return no
        data = await _json(request, MAX_REGISTRATION_BYTES)
        if isinstance(data, JSONResponse):
            return data
        spec, errors = rules.validate_spec(name, data)
        if spec is None:
            metrics.registrations.labels("invalid").inc()
            return _error(422, "invalid connector", errors)
        try:
            stored = await rules.put_connector(client, name, spec, max_connectors)
        except rules.TooManyConnectors as exc:
            metrics.registrations.labels("invalid").inc()
            return _error(422, "too many connectors", [{"loc": ["path", "name"], "msg": str(exc)}])
        metrics.registrations.labels("stored").inc()
        log.info("connector_registered", connector=name, version=stored.version, tools=len(stored.tools))
        return _dumped(stored)

    @router.get("/connectors/{name}", response_model=Connector, responses={**auth, 404: {"description": "unknown"}})
    async def get_connector(name: str, request: Request) -> Response:
        if (no := await refused(request)) is not None:
            return no
        found = await rules.get_connector(client, name)
        return _error(404, f"no connector {name}") if found is None else _dumped(found)

    @router.get("/connectors", response_model=ConnectorList, responses=auth)
    async def list_connectors(request: Request) -> Response:
        if (no := await refused(request)) is not None:
            return no
        _, found = await rules.registry(client)
        return JSONResponse(ConnectorList(connectors=sorted(found.values(), key=lambda c: c.name)).model_dump(mode="json"))

    @router.delete("/connectors/{name}", status_code=204, responses={**auth, 404: {"description": "unknown"}})
    async def delete_connector(name: str, request: Request) -> Response:
        if (no := await refused(request)) is not None:
            return no
        if not await rules.delete_connector(client, name):
            return _error(404, f"no connector {name}")
        await mcp_secrets.drop(client, name)  # an MCP connector's credential goes with it
        metrics.registrations.labels("deleted").inc()
        log.info("connector_removed", connector=name)
        return Response(status_code=204)


def _result_route(router: APIRouter, answers: Answers, refused: Refused) -> None:
    auth = AUTH

    @router.post("/connectors/{name}/results", response_model=ConnectorResultAccepted,
                 openapi_extra=_body(ConnectorResultSubmit),
                 responses={**auth, 202: {"description": "delivered to the session (or the accepted call completed)"},
                            404: {"description": "no such call of this connector", "content": _ERROR},
                            409: {"description": "the call already has a different answer", "content": _ERROR},
                            422: {"description": "not a valid result", "content": _ERROR}})
    async def post_result(name: str, request: Request) -> Response:
        if (no := await refused(request)) is not None:
            return no
        data = await _json(request, MAX_RESULT_BYTES)
        if isinstance(data, JSONResponse):
            return data
        try:
            body = ConnectorResultSubmit.model_validate(data)
        except ValidationError as exc:
            return _error(422, "invalid result", json.loads(exc.json(include_url=False, include_input=False)))
        return await answers.submit(name, body)
