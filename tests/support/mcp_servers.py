"""MCP servers the MCP connector tests start as real processes: the official reference server
(`@modelcontextprotocol/server-everything` from npm, streamable HTTP, 2025-11-25) and the `mcp`
SDK's own server (tests/support/mcp_server.py, 2026-07-28)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.ports import free_port
from tests.support.zygote import ROOT

EVERYTHING = ROOT / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
# Started with this environment only: its `get-env` tool answers the process environment, and the
# harness's own variables (the model key, the MCP secret key) are none of its business.
CLEAN_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "NODE_ENV": "production"}


@dataclass
class McpProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    calls: Path  # the Python server's arrivals, one JSON line per tools/call

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arrivals(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def issued_tokens(self) -> list[str]:
        tokens = self.calls.with_suffix(".tokens")
        return tokens.read_text().split() if tokens.exists() else []

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def _wait_listening(p: McpProcess, timeout: float = 30) -> McpProcess:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.proc.poll() is not None:
            raise RuntimeError(f"the MCP server exited: {p.log.read_text(errors='replace')[-2000:]}")
        try:
            httpx.get(p.base + "/", timeout=1)
            return p
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("the MCP server never listened")


def start_everything(workdir: Path) -> McpProcess:
    if not EVERYTHING.exists():
        raise RuntimeError(f"{EVERYTHING} is missing: run `npm install` (package.json devDependencies)")
    port = free_port()
    log = workdir / f"everything-{port}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(["node", str(EVERYTHING), "streamableHttp"], env={**CLEAN_ENV, "PORT": str(port)},
                                stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    return _wait_listening(McpProcess(proc, port, log, workdir / f"none-{port}"))


def start_python(workdir: Path, *flags: str) -> McpProcess:
    port = free_port()
    log, calls = workdir / f"pyserver-{port}.log", workdir / f"pyserver-{port}.calls"
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.support.mcp_server", str(port), str(calls), *flags],
                                env={**CLEAN_ENV, "PYTHONPATH": str(ROOT)}, stdout=out, stderr=subprocess.STDOUT,
                                cwd=ROOT)
    return _wait_listening(McpProcess(proc, port, log, calls))
