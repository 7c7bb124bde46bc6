"""Azure OpenAI (shared/serving/model.py, docs/models.md "Azure"; reference §7.1): `AsyncAzureOpenAI` with an
api-version, the v1 base URL without; deployment names mapped to catalogue models."""

from __future__ import annotations

from openai import AsyncAzureOpenAI, AsyncOpenAI

from services.runtime.hosting.session import model_settings
from shared.contracts.http import ModelConfig
from shared.serving.model import model_client
from shared.settings import Settings
from shared.storage.disk import session_paths

AZURE = {"OPENAI_API_KEY": "k", "AZURE_OPENAI_ENDPOINT": "https://res.openai.azure.com/"}


async def test_legacy_data_plane_with_an_api_version() -> None:
    client = model_client(Settings(**AZURE, OPENAI_API_VERSION="2025-04-01-preview"), "agent")
    try:
        assert isinstance(client, AsyncAzureOpenAI)
        assert client._custom_query == {"api-version": "2025-04-01-preview"}
        assert str(client.base_url).startswith("https://res.openai.azure.com/openai")
    finally:
        await client.close()


async def test_v1_api_without_an_api_version() -> None:
    client = model_client(Settings(**AZURE), "agent")
    try:
        assert type(client) is AsyncOpenAI and str(client.base_url) == "https://res.openai.azure.com/openai/v1/"
    finally:
        await client.close()


def test_a_deployment_is_sent_by_name_and_built_as_its_model(tmp_path: object) -> None:
    s = Settings(**AZURE, GAMMA_AZURE_DEPLOYMENTS='{"team-o3": "o3", "team-codex": "gpt-5-codex"}')
    paths = session_paths(tmp_path, "s1")  # type: ignore[arg-type]
    o3 = model_settings(s, ModelConfig(name="team-o3", api="chat"), "s1", paths)
    assert o3.model == "team-o3" and o3.caps.efforts == ("low", "medium", "high")
    assert not o3.caps.parallel_tool_calls.chat and not s.models.openai_endpoint
    codex = model_settings(s, ModelConfig(name="team-codex", api="chat"), "s1", paths)
    assert codex.api == "responses"  # a Responses-only model never goes to Chat
