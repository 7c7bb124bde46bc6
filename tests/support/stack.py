"""Start the five services as real processes against a test Redis db and data dir."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from scripted.factory import SPEC as SCRIPTED_FACTORY
from tests.support.ports import free_port
from tests.support.zygote import ROOT, ZYGOTE, ZygoteProcess

Process = subprocess.Popen[bytes] | ZygoteProcess

SERVICES = ("runtime", "digest", "compaction", "notifications", "proxy")
PORT_VARS = {
    "proxy": "GAMMA_PROXY_PORT",
    "notifications": "GAMMA_NOTIFICATIONS_PORT",
    "runtime": "GAMMA_RUNTIME_PORT",
    "digest": "GAMMA_DIGEST_PORT",
    "compaction": "GAMMA_COMPACTION_PORT",
    # The example connector (services/connectors/example): started only by the tests that use it.
    "connectors.example": "GAMMA_CONNECTOR_PORT",
}
EXAMPLE_CONNECTOR = "connectors.example"
# The public services' internal ports (/metrics, docs): Stack.url("proxy_metrics").
INTERNAL_PORT_VARS = {"proxy_metrics": "GAMMA_PROXY_METRICS_PORT", "notifications_metrics": "GAMMA_NOTIFICATIONS_METRICS_PORT"}
API_TOKEN = "tok-alice"
OTHER_TOKEN = "tok-bob"
SERVICE_TOKEN = "svc-token"


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def http_body(url: str) -> str:
    """What a URL answers, status and body, for an error message (never raises)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return f"{resp.status} {resp.read(2000).decode(errors='replace')}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read(2000).decode(errors='replace')}"
    except OSError as exc:
        return repr(exc)


@dataclass
class Stack:
    redis_url: str
    data_dir: Path
    env_overrides: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    procs: dict[str, Process] = field(default_factory=dict)
    log_dir: Path | None = None
    # The source tree the services run from (default: this one); a bench runs a baseline tree side by side.
    src: Path | None = None
    # Per service, on top of env_overrides: e.g. its own REDIS_URL through a fault proxy
    # (tests/support/faultproxy.py, tests/reliability/test_net_faults.py).
    service_env: dict[str, dict[str, str]] = field(default_factory=dict)
    layer: str = ""  # the sandbox layer the runtime was started with (tests/sandbox/conftest.py), when one was chosen

    def __post_init__(self) -> None:
        for name in (*SERVICES, *INTERNAL_PORT_VARS, EXAMPLE_CONNECTOR):
            self.ports.setdefault(name, free_port())
        self.log_dir = self.log_dir or self.data_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            REDIS_URL=self.redis_url,
            GAMMA_DATA_DIR=str(self.data_dir),
            GAMMA_API_TOKENS=f"alice:{API_TOKEN},bob:{OTHER_TOKEN}",
            GAMMA_SERVICE_TOKEN=SERVICE_TOKEN,
            GAMMA_IDLE_S="30",
            GAMMA_CLAIM_IDLE_MS="1500",
            GAMMA_LEASE_MS="3000",
            GAMMA_DIGEST_DEBOUNCE_MS="150",
            # Tests read the service streams' history to see what was published; the tests of
            # trimming itself (tests/hostile/test_stream_growth.py) set a short interval.
            GAMMA_STREAM_TRIM_INTERVAL_S="3600",
            PYTHONUNBUFFERED="1",
        )
        env.pop("OPENAI_API_KEY", None)
        env["GAMMA_MODEL_FACTORY"] = SCRIPTED_FACTORY  # the offline model, wired as `make run` does
        for name, var in (PORT_VARS | INTERNAL_PORT_VARS).items():
            env[var] = str(self.ports[name])
        env.update(self.env_overrides)
        if self.src is not None:
            env["PYTHONPATH"] = str(self.src)
        return env

    def env_for(self, name: str) -> dict[str, str]:
        return {**self.env, **self.service_env.get(name, {})}

    def url(self, name: str = "proxy") -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def start(self, *names: str, wait: bool = True) -> Stack:
        for name in names or SERVICES:
            assert self.log_dir is not None
            self.procs[name] = self._spawn(name)
        if wait:
            self.wait_ready(*(names or SERVICES))
        return self

    def _spawn(self, name: str) -> Process:
        """Forked from the test zygote when it runs the same interpreter setup (most of a start is
        imports: tests/support/zygote.py), else a fresh `python -m`."""
        assert self.log_dir is not None
        env, cwd, path = self.env_for(name), self.src or ROOT, self.log_dir / f"{name}.log"
        if self.src is None and ZYGOTE.fits(env, cwd):
            return ZYGOTE.spawn(f"services.{name}", env, cwd, path)
        with open(path, "ab") as log:  # the child holds its own copy of the descriptor
            return subprocess.Popen([sys.executable, "-m", f"services.{name}"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT, cwd=cwd)

    def wait_ready(self, *names: str, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        pending = list(names or SERVICES)
        while pending:
            pending = [n for n in pending if not http_ok(self.url(n) + "/healthz")]
            if not pending:
                break
            for n in pending:
                proc = self.procs.get(n)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{n} exited with {proc.returncode}: {self.log(n)[-3000:]}")
            if time.time() > deadline:
                raise RuntimeError(f"not ready: {pending}")
            time.sleep(0.1)
        # Readiness of the whole stack: the proxy's /readyz needs all five heartbeats.
        if "proxy" in self.procs and set(SERVICES) <= set(self.procs):
            while not http_ok(self.url("proxy") + "/readyz"):
                if time.time() > deadline:
                    raise RuntimeError(f"proxy /readyz never became 200: {http_body(self.url('proxy') + '/readyz')}")
                time.sleep(0.1)

    def log(self, name: str) -> str:
        assert self.log_dir is not None
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            proc.wait(timeout=30)

    def restart(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            self.kill(name)
        self.start(name)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
