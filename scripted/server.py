"""The scripted model as its own HTTP server process: `python -m scripted.server`.

A real provider runs out of process: its pacing, JSON encoding and HTTP framing cost the harness
nothing. In process (scripted/transport.py's ScriptedTransport behind the openai client, the test default)
that work runs on the runtime's event loop: about a third of the runtime's CPU per streamed token at
500 sessions (bench/results/stream.md). This server runs the same ScriptedTransport (same model: the
runtime's ScriptedGamma built with the same skills, same pacing, stamps, prompt cache, errors) behind
a small HTTP/1.1 server on asyncio streams (uvloop when installed); the runtime reaches it as any
OpenAI-compatible server: OPENAI_BASE_URL=http://127.0.0.1:PORT/v1, OPENAI_API_KEY=anything,
GAMMA_MODEL_API=responses (a non-OpenAI base URL otherwise defaults to Chat Completions).

Serves POST {prefix}/responses and {prefix}/chat/completions (streaming answers chunked, each paced
batch of tokens one chunk, as a provider's socket delivers them), keep-alive, bounded request heads
and bodies (431 / 413), 404 for anything else. Local use only (bench, `make run` trials): it binds
to 127.0.0.1 by default and has no auth.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import httpx2

from scripted.gamma import ScriptedGamma
from scripted.pacing import Timing
from scripted.settings import ScriptedSettings
from scripted.transport import ScriptedTransport
from services.runtime.skillset.paths import skills_dir
from services.runtime.skillset.skills import load_skills
from shared.serving.gcpolicy import heap_freezer
from shared.settings import load_settings

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024  # a long conversation, sent whole each call (stateless Responses API)
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Payload Too Large", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    """(method, path, headers lower-cased, body), or None when the client closed between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise BadRequest(400, "truncated request head") from exc
        return None
    except asyncio.LimitOverrunError as exc:
        raise BadRequest(431, "request head too large") from exc
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, "bad request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(400, "bad header line")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise BadRequest(400, "chunked request bodies are not supported")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError as exc:
        raise BadRequest(400, "bad content-length") from exc
    if length < 0 or length > MAX_BODY:
        raise BadRequest(413, "request body too large")
    body = await reader.readexactly(length) if length else b""
    return parts[0], parts[1], headers, body


def head_bytes(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def write_response(writer: asyncio.StreamWriter, response: httpx2.Response) -> None:
    """A body the transport has in full goes with a Content-Length; a paced stream chunked, one
    chunk per batch the pacing releases (flushed at once: the tokens were due)."""
    headers = [(k, v) for k, v in response.headers.items()
               if k.lower() not in ("content-length", "transfer-encoding", "connection")]
    stream = response.stream
    if isinstance(stream, httpx2.ByteStream):
        body = response.read()
        writer.write(head_bytes(response.status_code, [*headers, ("content-length", str(len(body)))]) + body)
        await writer.drain()
        return
    writer.write(head_bytes(response.status_code, [*headers, ("transfer-encoding", "chunked")]))
    try:
        async for chunk in response.aiter_raw():
            if chunk:
                writer.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                await writer.drain()
    except httpx2.RemoteProtocolError:
        writer.close()  # a scripted `cut`: the connection drops mid-body, as the in-process one raises
        raise
    writer.write(b"0\r\n\r\n")
    await writer.drain()


class ScriptedServer:
    def __init__(self, transport: ScriptedTransport, prefix: str = "/v1") -> None:
        self.transport = transport
        self.prefix = prefix.rstrip("/")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, httpx2.RemoteProtocolError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            request = await read_request(reader)
        except BadRequest as exc:
            await write_response(writer, httpx2.Response(exc.status, json={"error": {"message": str(exc)}}))
            return False
        if request is None:
            return False
        method, path, headers, body = request
        path = path.split("?", 1)[0]
        if method != "POST" or not path.startswith(self.prefix + "/"):
            response = httpx2.Response(404, json={"error": {"message": "scripted model: unknown path",
                                                           "code": "not_found"}})
        else:
            url = "http://scripted.local" + path
            response = await self.transport.handle_async_request(httpx2.Request(method, url, content=body))
        await write_response(writer, response)
        return headers.get("connection", "").lower() != "close"


def scripted_transport_for_runtime() -> ScriptedTransport:
    """The model the runtime would build in process (scripted/factory.py), with its timing."""
    return ScriptedTransport(ScriptedGamma(load_skills(skills_dir())), Timing.from_settings(ScriptedSettings()))


async def serve(host: str, port: int, ready: asyncio.Event | None = None) -> None:
    server = ScriptedServer(scripted_transport_for_runtime())
    settings = load_settings()
    # Its heap holds every open stream's pre-built events: the same gen-2 stalls as the services'.
    freezer = asyncio.ensure_future(heap_freezer(settings.server.gc_freeze_s, settings.server.gc_full_s,
                                                 settings.server.gc_full_growth))
    srv = await asyncio.start_server(server.handle, host, port, limit=MAX_HEAD, backlog=2048)
    print(f"scripted model on http://{host}:{port}/v1", flush=True)
    if ready is not None:
        ready.set()
    try:
        async with srv:
            await srv.serve_forever()
    finally:
        freezer.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args()
    try:
        import uvloop  # the services' loop too (uvicorn picks it when installed)
    except ImportError:
        asyncio.run(serve(args.host, args.port))
    else:
        uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
