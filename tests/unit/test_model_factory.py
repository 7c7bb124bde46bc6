"""One model factory (shared/serving/model.py `model_client`, README "Models"): the OpenAI client by default,
the factory GAMMA_MODEL_FACTORY names otherwise; the scripted model's factory hands out the real client
when a key is set and the scripted one offline."""

from __future__ import annotations

import pydantic
import pytest
from openai import AsyncOpenAI

from scripted import FACTORY
from scripted.transport import scripted_transport
from shared.serving.model import ModelConfigError, ModelRole, model_client
from shared.settings import Settings


def settings(**values: object) -> Settings:
    return Settings(**values)


async def test_without_a_key_or_a_factory_the_service_stops_with_a_clear_error() -> None:
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY"):
        model_client(settings(OPENAI_API_KEY=None), "agent")


async def test_with_a_key_the_openai_client() -> None:
    client = model_client(settings(OPENAI_API_KEY="k", OPENAI_BASE_URL="http://127.0.0.1:9/v1"), "summarizer")
    try:
        assert isinstance(client, AsyncOpenAI) and client.max_retries == 2 and scripted_transport(client) is None
    finally:
        await client.close()


@pytest.mark.parametrize("role", ["agent", "summarizer"])
async def test_the_scripted_factory_offline_and_with_a_key(role: ModelRole) -> None:
    offline = model_client(settings(OPENAI_API_KEY=None, GAMMA_MODEL_FACTORY=FACTORY), role)
    keyed = model_client(settings(OPENAI_API_KEY="k", GAMMA_MODEL_FACTORY=FACTORY), role)
    try:
        assert scripted_transport(offline) is not None and scripted_transport(keyed) is None
        assert keyed.max_retries == (0 if role == "agent" else 2)  # the runtime retries the agent's calls itself
    finally:
        await offline.close()
        await keyed.close()


def test_a_factory_name_is_checked() -> None:
    with pytest.raises(pydantic.ValidationError):
        settings(GAMMA_MODEL_FACTORY="not a module path")
    with pytest.raises(ModelConfigError, match="no such function"):
        model_client(settings(GAMMA_MODEL_FACTORY="shared.serving.model:nothing_here"), "agent")
