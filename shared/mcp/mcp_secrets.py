"""MCP connector credentials at rest (docs/integration.md "MCP connectors").

A credential is encrypted with Fernet (AES-128-CBC + HMAC-SHA256) under `GAMMA_MCP_SECRET_KEY` (one
key, or several comma-separated: the first encrypts, all decrypt, so a key can be rotated) and
stored in its own hash `gamma:{connectors}:mcp-credentials` (name -> token), never in the registry,
an event, a log line or the model's context. The plaintext names its connector and the URL it was
given for, so a token copied to another connector's field, or a credential left from before the URL
changed, is never presented to another server.
"""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from pydantic import SecretStr, TypeAdapter

from shared.contracts.mcp import McpAuth
from shared.redis import keys

_AUTH: TypeAdapter[McpAuth] = TypeAdapter(McpAuth)


class NoSecretKey(Exception):
    """No `GAMMA_MCP_SECRET_KEY`: a credential can be neither stored nor read."""


class BadSecret(Exception):
    """A stored credential that does not decrypt (another key, another connector's): never used."""


def cipher(keyring: str) -> MultiFernet:
    parts = [k.strip() for k in keyring.split(",") if k.strip()]
    if not parts:
        raise NoSecretKey("GAMMA_MCP_SECRET_KEY is not set: MCP credentials cannot be stored or read")
    return MultiFernet([Fernet(k.encode()) for k in parts])


def _revealed(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return {k: _revealed(v) for k, v in value.items()}
    return value


def seal(name: str, url: str, auth: McpAuth, keyring: str) -> bytes:
    plain = json.dumps({"connector": name, "url": url, "auth": _revealed(auth.model_dump())}, separators=(",", ":"))
    return cipher(keyring).encrypt(plain.encode())


def unseal(name: str, url: str, token: bytes, keyring: str) -> McpAuth:
    try:
        data = json.loads(cipher(keyring).decrypt(token))
    except (InvalidToken, ValueError):
        raise BadSecret(f"the credential of connector {name} does not decrypt with GAMMA_MCP_SECRET_KEY") from None
    if data.get("connector") != name or data.get("url") != url:
        raise BadSecret(f"the stored credential is not connector {name}'s for its current URL")
    return _AUTH.validate_python(data["auth"])


async def store(client: aioredis.Redis, name: str, url: str, auth: McpAuth | None, keyring: str) -> None:
    """Replace the connector's credential (None: it has none)."""
    if auth is None:
        await client.hdel(keys.MCP_CREDENTIALS, name)  # type: ignore[misc]
    else:
        await client.hset(keys.MCP_CREDENTIALS, name, seal(name, url, auth, keyring))  # type: ignore[misc]


async def load(client: aioredis.Redis, name: str, url: str, keyring: str) -> McpAuth | None:
    token = await client.hget(keys.MCP_CREDENTIALS, name)  # type: ignore[misc]
    if token is None:
        return None
    return unseal(name, url, token if isinstance(token, bytes) else str(token).encode(), keyring)


async def drop(client: aioredis.Redis, name: str) -> None:
    await client.hdel(keys.MCP_CREDENTIALS, name)  # type: ignore[misc]
