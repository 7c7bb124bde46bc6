"""Base models: wire contracts reject unknown fields so drift is loud."""

from __future__ import annotations

import time
import uuid

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

# A W3C trace context header (version 00): the trace a stream entry continues (shared/telemetry/tracing.py).
TRACEPARENT = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"


class Contract(BaseModel):
    """snake_case wire model (streams, HTTP bodies)."""

    model_config = ConfigDict(extra="forbid")


class CamelContract(BaseModel):
    """camelCase on the wire and on disk (Pi transcript, SessionUIState, the client payloads)."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True
    )


def new_id(prefix: str = "") -> str:
    return prefix + uuid.uuid4().hex[:16]


def now_ms() -> int:
    return int(time.time() * 1000)
