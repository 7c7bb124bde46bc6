"""The scripted model as its own process, as a provider is (bench-stream's and bench-stalls'
`--model-server`): always this tree's server, also for a `--src`/`--before-src` runtime, which reaches
it over HTTP like any provider."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from services.stack import free_port

ROOT = Path(__file__).resolve().parents[1]


def start_model_server(api: str = "responses", model_env: dict[str, str] | None = None,
                       ) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """The server's process, and the environment that points a runtime at it."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "scripted.server", "--port", str(port)],
                            env={**os.environ, **(model_env or {}),  # this tree first; the rest kept (a probe's sitecustomize)
                                 "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.post(f"http://127.0.0.1:{port}/health", timeout=1)  # any answer (404): it is up
            break
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the scripted model server did not start") from None
            time.sleep(0.2)
    return proc, {"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "bench-not-a-key",
                  "GAMMA_MODEL_API": api}
