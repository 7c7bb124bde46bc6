"""`POST /notifications`: service-token auth (the static token, or an IdP JWT carrying the service scope:
shared/trust/oidc.py), size cap, typed body, dedupe answer."""

from __future__ import annotations

import json
import secrets
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from services.notifications.delivery import Delivery, NotificationConflict, UnknownSession
from shared.contracts.http import ErrorBody
from shared.contracts.streams.notifications import NotificationAccepted, NotificationSubmit
from shared.trust.oidc import BearerVerifier, InvalidBearer, looks_like_jwt

# Payloads are small (ids and refs); the cap keeps a producer bug from filling Redis.
MAX_NOTIFICATION_BYTES = 256 * 1024


_ERROR = {"application/json": {"schema": ErrorBody.model_json_schema()}}
RESPONSES: dict[int | str, dict[str, object]] = {
    200: {"description": "a repeat of an id already stored with the same notification (duplicate: true)",
          "content": {"application/json": {"schema": NotificationAccepted.model_json_schema()}}},
    202: {"description": "stored (and delivered when the session is live)",
          "content": {"application/json": {"schema": NotificationAccepted.model_json_schema()}}},
    401: {"description": "a missing or unknown bearer token, or an invalid JWT", "content": _ERROR},
    403: {"description": "a JWT without the service scope", "content": _ERROR},
    404: {"description": "unknown session", "content": _ERROR},
    410: {"description": "the session was deleted", "content": _ERROR},
    409: {"description": "the id was already used for a different notification; detail.id names it",
          "content": _ERROR},
    413: {"description": "body too large", "content": _ERROR},
    422: {"description": "not JSON, too deeply nested, a number too long, or not a valid notification",
          "content": _ERROR},
}


def _inlined(node: Any, defs: dict[str, Any]) -> Any:
    """A JSON schema with its local `$defs` references inlined: the OpenAPI document has no `$defs`
    of its own for a body the route parses itself."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inlined(defs[ref.removeprefix("#/$defs/")], defs)
        # a discriminator maps to $defs names: oneOf alone says the same once they are inlined
        return {k: _inlined(v, defs) for k, v in node.items() if k not in ("$defs", "discriminator")}
    if isinstance(node, list):
        return [_inlined(v, defs) for v in node]
    return node


_SUBMIT = NotificationSubmit.model_json_schema()
# Declared for the OpenAPI document (docs, schemathesis); the route reads and validates the body itself
# so its size cap applies before anything is parsed.
BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": _inlined(_SUBMIT, _SUBMIT.get("$defs", {}))}}}}


def _error(status: int, message: str, detail: object = None, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(ErrorBody(error=message, detail=detail).model_dump(mode="json"), status_code=status,
                        headers=headers)


async def refusal(header: str, service_token: str, verifier: BearerVerifier | None) -> JSONResponse | None:
    """None when the caller may post; otherwise the 401/403 answer (RFC 6750 challenge for JWTs)."""
    scheme, _, token = header.partition(" ")
    if not header or scheme.lower() != "bearer" or not token:
        return _error(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    if secrets.compare_digest(token.encode(), service_token.encode()):
        return None
    try:
        # A token that is neither the service token nor a JWT is unknown here: 401 with a challenge, as
        # the proxy answers (RFC 6750 section 3.1); 403 is for a valid JWT lacking the service scope.
        if verifier is None or not looks_like_jwt(token):
            raise InvalidBearer("unknown bearer token")
        await verifier.require_scope(token)
    except InvalidBearer as exc:
        status = 403 if exc.error == "insufficient_scope" else 401
        return _error(status, exc.description, headers={"WWW-Authenticate": exc.challenge})
    return None


def make_router(delivery: Delivery, service_token: str, max_bytes: int,
                verifier: BearerVerifier | None = None) -> APIRouter:
    router = APIRouter()
    limit = min(max_bytes, MAX_NOTIFICATION_BYTES)

    @router.post("/notifications", status_code=202, response_model=None, responses=RESPONSES, openapi_extra=BODY)
    async def post_notification(request: Request) -> JSONResponse:
        refused = await refusal(request.headers.get("authorization", ""), service_token, verifier)
        if refused is not None:
            return refused
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return _error(413, f"notification body is {declared} bytes; the limit is {limit} bytes")
        raw = bytearray()
        async for chunk in request.stream():
            raw.extend(chunk)
            if len(raw) > limit:
                return _error(413, f"notification body exceeds the limit of {limit} bytes")
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(422, f"body is not JSON: {exc}")
        try:
            body = NotificationSubmit.model_validate(data)
        except ValidationError as exc:
            return _error(422, "invalid notification", json.loads(exc.json(include_url=False, include_input=False)))
        try:
            accepted = await delivery.submit(body)
        except UnknownSession as exc:
            if exc.deleted:
                return _error(410, f"session {body.session_id} was deleted")
            return _error(404, f"unknown session {body.session_id}")
        except NotificationConflict as exc:
            return _error(409, str(exc), {"id": exc.notification_id})
        return JSONResponse(accepted.model_dump(mode="json"), status_code=200 if accepted.duplicate else 202)

    return router
