"""Model access: the real `openai.AsyncOpenAI` client, built by one factory.

The runtime and the compaction service ask `model_client` for their client. It builds the OpenAI client
(OPENAI_API_KEY, OPENAI_BASE_URL: any OpenAI-compatible server; AZURE_OPENAI_ENDPOINT: Azure OpenAI,
docs/models.md "Azure") unless GAMMA_MODEL_FACTORY names another `ModelFactory` (`module:function`):
the dev/test launchers name the offline model's that way (README "Models"), so no production module
knows it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Literal, cast

import httpx2
from openai import AsyncAzureOpenAI, AsyncOpenAI, DefaultAioHttpClient, DefaultAsyncHttpxClient

from shared.settings import Settings

ModelRole = Literal["agent", "summarizer"]
ModelFactory = Callable[[Settings, ModelRole], AsyncOpenAI]
# The agent's calls are retried by the runtime itself (bounded, Retry-After honoured, reported as
# events); a summary call by the SDK.
RETRIES: dict[ModelRole, int] = {"agent": 0, "summarizer": 2}


class ModelConfigError(RuntimeError):
    """No model can be reached with this configuration (raised at start, not at the first call)."""


def model_client(settings: Settings, role: ModelRole) -> AsyncOpenAI:
    """The client for `role`: GAMMA_MODEL_FACTORY's when set, else the OpenAI client."""
    if settings.models.model_factory:
        return load_factory(settings.models.model_factory)(settings, role)
    return openai_client(settings, RETRIES[role])


def load_factory(spec: str) -> ModelFactory:
    module, _, name = spec.partition(":")
    factory = getattr(importlib.import_module(module), name, None)
    if not callable(factory):
        raise ModelConfigError(f"GAMMA_MODEL_FACTORY={spec}: no such function")
    return cast(ModelFactory, factory)


def openai_client(settings: Settings, max_retries: int = 2) -> AsyncOpenAI:
    if not settings.models.openai_api_key:
        raise ModelConfigError("no OPENAI_API_KEY (offline, start the stack through `make run`, which wires "
                               "the scripted model; README \"Models\")")
    models = settings.models
    if models.azure_endpoint:
        return azure_client(settings, max_retries)
    return AsyncOpenAI(api_key=models.openai_api_key, base_url=models.openai_base_url,
                       max_retries=max_retries, http_client=_http_client(settings))


def azure_client(settings: Settings, max_retries: int) -> AsyncOpenAI:
    """Azure OpenAI (reference §7.1): with an api-version, `AsyncAzureOpenAI` (Chat under
    `/openai/deployments/{deployment}/…`, Responses under `/openai/responses`, `api-key` header);
    without, the v1 API, which the plain client speaks at `{endpoint}/openai/v1/`. Either way a
    request's `model` is the deployment name, mapped to its catalogue model by GAMMA_AZURE_DEPLOYMENTS."""
    models = settings.models
    endpoint = (models.azure_endpoint or "").rstrip("/")
    if models.azure_api_version:
        return AsyncAzureOpenAI(azure_endpoint=endpoint, api_key=models.openai_api_key,
                                api_version=models.azure_api_version, max_retries=max_retries,
                                http_client=_http_client(settings))
    base = endpoint if endpoint.endswith("/openai/v1") else f"{endpoint}/openai/v1"
    return AsyncOpenAI(api_key=models.openai_api_key, base_url=f"{base}/", max_retries=max_retries,
                       http_client=_http_client(settings))


def _http_client(settings: Settings) -> httpx2.AsyncClient:
    """One connection per streaming call: a worker's live sessions stream at once (the SDK's default
    keeps 100 alive, so the 101st stream onwards reconnected every call)."""
    limits = httpx2.Limits(max_connections=settings.models.model_max_connections,
                          max_keepalive_connections=settings.models.model_max_connections)
    if settings.models.model_http == "aiohttp":
        return DefaultAioHttpClient(limits=limits)
    return DefaultAsyncHttpxClient(limits=limits)


def reads_merged(settings: Settings) -> bool:
    """One read of a model response body returns everything the connection buffered (not one HTTP chunk
    per read, as httpx's own transport does): the runtime's read gate needs it. An explicit setting,
    GAMMA_MODEL_HTTP=aiohttp, says so, never the client's internals (a factory's client with
    GAMMA_MODEL_HTTP=httpx is read ungated, chunk by chunk)."""
    return settings.models.model_http == "aiohttp"
