"""What a wake opens a session from (docs/architecture.md "The wake"): the worker's shared parts
(`WorkerParts`, built once per worker), the session's own deps for its prompt variant
(`SessionDeps`), its model calls' settings from the session row (`model_settings`), and the disk
fence claimed for the new lease (`claim_disk`). Session.open (session.py) runs the wake's steps."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from openai import AsyncOpenAI
from prometheus_client import CollectorRegistry

from services.runtime.hosting.image_gc import ImageCollector
from services.runtime.hosting.model_calls import ModelCalls
from services.runtime.live.diskfence import DiskFence
from services.runtime.live.events import BusPublish
from services.runtime.live.lease import Lease
from services.runtime.live.sender import EventSender
from services.runtime.model.openai_stream import ModelSettings
from services.runtime.model.sse import ReadGate
from services.runtime.runs.turn_starts import StartGate
from services.runtime.skillset.prompt import VARIANTS, preloaded_skills
from services.runtime.skillset.skills import Skill
from services.runtime.turns.cache_key import prompt_cache_key
from shared.contracts.http import ModelConfig
from shared.history.tokens import TokenCounter
from shared.media.images import ImageSource
from shared.settings import Settings
from shared.storage.disk import SessionPaths


class StepClock(Protocol):
    """The wake's step timing (wake_timing.py `WakeClock`)."""

    def mark(self, step: str) -> None: ...

    def fields(self) -> dict[str, float]: ...


@dataclass
class SessionDeps:
    settings: Settings
    client: Any  # redis.asyncio.Redis
    model_client: AsyncOpenAI
    skills: Mapping[str, Skill]
    system_prompt: str
    counter: TokenCounter
    ack: Any  # async (sid, entry_id) -> None
    static_prefix: str = ""
    read_gate: ReadGate | None = None  # model streams read once per delta tick (sender.py)
    starts: StartGate | None = None  # the worker's pacing of turn starts (turn_starts.py)
    preloaded: tuple[Skill, ...] = ()  # the variant's preloaded skills, recorded at session start
    variant: str = "base"  # services/runtime/skillset/prompt.py VARIANTS
    registry: CollectorRegistry | None = None  # the service's Prometheus registry
    model_calls: ModelCalls | None = None  # the worker's call limits, provider gates and counters
    # (sid, reason) -> None: the worker closes the session now (persist, release the lease, then
    # answer the Stop); without it a Stop is answered at once and closed by the next housekeeping.
    request_close: Any = None
    images: ImageCollector | None = None  # the worker's collector of unreferenced images, run at close


@dataclass(frozen=True)
class WorkerParts:
    """What every session of one worker shares: built once (worker.py), handed to each wake."""

    settings: Settings
    client: Any  # redis.asyncio.Redis
    model_client: AsyncOpenAI
    skills: Mapping[str, Skill]
    system_prompts: Mapping[str, str]  # by prompt variant
    counter: TokenCounter
    ack: Any  # the inbox reader's: async (sid, entry_id) -> None
    static_prefix: str
    sender: EventSender  # every session's events, in order (sender.py)
    bus: BusPublish
    images: ImageCollector
    request_close: Callable[[str, str], None]
    registry: CollectorRegistry | None = None
    model_calls: ModelCalls | None = None
    read_gate: ReadGate | None = None
    starts: StartGate | None = None

    def deps(self, variant: str) -> SessionDeps:
        """One session's deps, for its row's prompt variant (an unknown one is the base prompt)."""
        variant = variant if variant in VARIANTS else "base"
        return SessionDeps(settings=self.settings, client=self.client, model_client=self.model_client,
                           skills=self.skills, system_prompt=self.system_prompts.get(variant) or self.system_prompts["base"],
                           counter=self.counter, ack=self.ack, static_prefix=self.static_prefix,
                           registry=self.registry, model_calls=self.model_calls, read_gate=self.read_gate,
                           starts=self.starts, request_close=self.request_close, images=self.images,
                           variant=variant, preloaded=tuple(preloaded_skills(variant, self.skills)))  # type: ignore[arg-type]


def row_model(row: Mapping[str, str]) -> tuple[ModelConfig, str]:
    """The session row's model choice and prompt variant (both hostile: validated, an unknown variant
    is the base one)."""
    model = ModelConfig.model_validate_json(row["model"]) if row.get("model") else ModelConfig()
    variant = row.get("variant", "base")
    return model, variant if variant in VARIANTS else "base"


def model_settings(settings: Settings, model: ModelConfig, sid: str, paths: SessionPaths,
                   variant: str = "base") -> ModelSettings:
    """The session's model calls: its row's choice (`model`) over the deployment's defaults, built from
    the model's catalogue entry (shared/catalogue; docs/models.md). A session created before its
    model's entry said so is moved to an API the model serves (a Responses-only model never goes to Chat)."""
    models = settings.models
    name = model.name or models.model
    caps = models.catalogue.resolve(name).caps
    api = model.api or models.default_model_api
    if api not in caps.apis:
        api = caps.apis[0]
    return ModelSettings(model=name, reasoning_effort=model.reasoning_effort, api=api, caps=caps,
                         trusted_role=models.trusted_role_for(name, api), max_output_tokens=models.max_output_tokens,
                         cache_key=prompt_cache_key(models.prompt_cache_key, models.prompt_cache_key_shards, sid,
                                                    variant), chat_cache_key=models.openai_endpoint, images=ImageSource(paths.root),
                         image_detail=settings.images.image_detail, max_retries=models.model_max_retries,
                         retry_base_s=models.model_retry_base_s, retry_max_s=models.model_retry_max_s)


async def claim_disk(settings: Settings, paths: SessionPaths, lease: Lease) -> DiskFence:
    """Before anything is read: a holder that lost the session (paused past its lease) can no longer
    write once this is stored, and whatever it wrote before is on disk now (diskfence.py)."""
    disk = DiskFence(paths.fence, lease.sid, lease.fence, lock_timeout_s=settings.runtime.lease_ms * 3 / 1000)
    try:
        await disk.claim(until=lease.valid_until)  # a frozen writer holding the lock: wait, not past the lease
        await lease.check()  # the claim may have waited on a frozen writer: still ours?
    except BaseException:
        disk.close()
        raise
    return disk
