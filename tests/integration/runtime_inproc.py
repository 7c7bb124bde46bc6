"""A runtime Worker inside the test's event loop (real Redis, scripted model), for tests that must
reach into a live Session to hit an exact moment of a run (e.g. the end of its task)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis
from pydantic import BaseModel

from scripted.gamma import ScriptedGamma
from scripted.pacing import Timing
from scripted.settings import ScriptedSettings
from scripted.transport import scripted_client
from services.runtime.app import skills_dir
from services.runtime.hosting.session import Session
from services.runtime.hosting.worker import Worker
from services.runtime.skillset.prompt import VARIANTS, build_system_prompt
from services.runtime.skillset.skills import load_skills
from shared.contracts.streams.inbox import Barrier, InboxMessage
from shared.contracts.streams.wake import Wake
from shared.redis import keys
from shared.streams.inbox import append
from tests.support.inproc import settings_for


@dataclass
class InProc:
    worker: Worker
    redis: aioredis.Redis
    data_dir: Path

    async def live(self, sid: str) -> Session:
        """Wake `sid`, pass its barrier, return the live Session."""
        wake = Wake(session_id=sid)
        await self.worker.on_wake(wake)
        session = self.worker.sessions[sid]
        await self.append(Barrier(session_id=sid, wake_id=wake.wake_id))
        return session

    async def append(self, message: InboxMessage) -> None:
        await append(self.redis, message)

    async def events(self, sid: str, type_: str) -> list[dict[str, object]]:
        import json

        out = []
        for _, fields in await self.redis.xrange(keys.events(sid)):
            ev = json.loads(fields[b"data"])
            if ev["type"] == type_:
                out.append(ev["data"])
        return out


@asynccontextmanager
async def inproc_worker(redis_url: str, data_dir: Path, **env: object) -> AsyncIterator[InProc]:
    settings = settings_for(redis_url, data_dir, GAMMA_IDLE_S=120, **env)
    client = aioredis.from_url(redis_url)
    skills = load_skills(skills_dir())
    prompts = {v: build_system_prompt(v, skills) for v in VARIANTS}

    async def bus(stream: str, message: BaseModel) -> None:
        await client.xadd(stream, {"data": message.model_dump_json()})

    worker = Worker(settings, client, scripted_client(ScriptedGamma(skills), Timing.from_settings(ScriptedSettings(**env))), skills, prompts, bus,
                    "w-inproc")
    worker.start()
    try:
        yield InProc(worker, client, data_dir)
    finally:
        await worker.shutdown()
        await client.aclose()
