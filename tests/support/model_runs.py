"""Drive real runtime sessions in process over either model API and read what the model received
(the scripted transport keeps the request bodies) and what the session recorded."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from scripted.transport import ScriptedTransport, scripted_transport
from services.proxy.rows import SessionRow
from shared.contracts.http import ModelConfig
from shared.contracts.records.messages import ImageRef
from shared.contracts.streams.inbox import UserPrompt
from shared.redis import keys
from tests.integration.runtime_inproc import InProc
from tests.support.polling import eventually

FAST_RETRIES = {"GAMMA_MODEL_MAX_RETRIES": 2, "GAMMA_MODEL_RETRY_BASE_S": 0.05, "GAMMA_MODEL_RETRY_MAX_S": 2.0}


def transport(proc: InProc) -> ScriptedTransport:
    found = scripted_transport(proc.worker.model_client)
    assert found is not None
    return found


async def create_row(proc: InProc, sid: str, api: str, effort: str | None = "low", name: str | None = None) -> None:
    now = int(time.time() * 1000)
    row = SessionRow(id=sid, owner="u", model=ModelConfig(api=api, reasoning_effort=effort, name=name),
                     created_at=now, updated_at=now)
    await proc.redis.hset(keys.session_row(sid), mapping=row.to_hash())  # type: ignore[arg-type]


async def prompt_and_wait(proc: InProc, sid: str, text: str, within_s: float = 60,
                          images: list[ImageRef] | None = None) -> dict[str, Any]:
    """Send a prompt; return the run's last event of interest: a blocking message_user or an error."""
    before = len(await proc.events(sid, "message_user")) + len(await proc.events(sid, "error"))
    await proc.append(UserPrompt(session_id=sid, message=text, images=images))

    async def answer() -> dict[str, Any] | None:
        users = await proc.events(sid, "message_user")
        errors = await proc.events(sid, "error")
        if len(users) + len(errors) > before and await _idle(proc, sid):
            blocking = [u for u in users if u.get("block_on_user")]
            return {"message_user": blocking[-1] if blocking else None, "errors": errors}
        return None
    return await eventually(answer, timeout=within_s, what=f"an answer to {text[:80]!r}")


async def _idle(proc: InProc, sid: str) -> bool:
    statuses = await proc.events(sid, "status")
    return bool(statuses) and statuses[-1].get("running") is False


def bodies(proc: InProc, api: str) -> list[dict[str, Any]]:
    return [b for a, b in transport(proc).requests if a == api]


def transcript(data_dir: Path, sid: str) -> list[dict[str, Any]]:
    path = data_dir / "sessions" / sid / "transcript.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assistant_entries(data_dir: Path, sid: str) -> list[dict[str, Any]]:
    return [e["message"] for e in transcript(data_dir, sid)
            if e["type"] == "message" and e["message"]["role"] == "assistant"]
