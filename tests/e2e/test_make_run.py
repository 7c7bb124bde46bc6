"""`make run` end to end: embedded Redis (nothing answers at REDIS_URL), five services ready, the
proxy URL printed, and on SIGTERM every child and the embedded Redis exit."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from services.stack import redis_answers
from tests.support.needs import missing, needs
from tests.support.polling import wait_sync
from tests.support.ports import free_port
from tests.support.procs import alive, descendants
from tests.support.stack import INTERNAL_PORT_VARS, PORT_VARS

REPO = Path(__file__).resolve().parents[2]

pytestmark = needs(None if shutil.which("make") else "make is not installed")


def readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


def wait_ready(name: str, port: int, seconds: float) -> None:
    """/readyz answers 200 before the deadline (one slow answer on a loaded machine is not a failure)."""
    wait_sync(lambda: readyz(port) == 200, timeout=seconds, interval=0.2, what=f"{name} ready")


def test_make_run_brings_all_five_services_up_and_stops_them(tmp_path: Path) -> None:
    ports = {name: free_port() for name in PORT_VARS}
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    assert not redis_answers(dead_redis)
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "GAMMA_API_TOKENS", "MAKEFLAGS")}
    env.update({var: str(ports[name]) for name, var in PORT_VARS.items()})
    env.update({var: str(free_port()) for var in INTERNAL_PORT_VARS.values()})  # /metrics of proxy, notifications
    env.update(REDIS_URL=dead_redis, GAMMA_DATA_DIR=str(data), PYTHONUNBUFFERED="1")
    env.pop("GAMMA_RUNTIME_WORKERS", None)  # the default: one runtime worker per core
    workers = os.cpu_count() or 1
    tree: dict[int, str] = {}

    # `-o .venv/.installed`: the venv in this checkout is already installed (CI runs `make install` first);
    # never let a test reinstall it.
    proc = subprocess.Popen(
        ["make", "-s", "-o", ".venv/.installed", "run"], cwd=REPO, env=env, stdout=subprocess.PIPE,
        stderr=open(tmp_path / "stderr.log", "wb"), text=True,  # noqa: SIM115 - closed with the child
    )
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        proxy_url = f"http://127.0.0.1:{ports['proxy']}/"

        def printed() -> bool:
            assert proc.poll() is None, f"make run exited early: {lines} {(tmp_path / 'stderr.log').read_text()[-3000:]}"
            return any(proxy_url in line for line in lines)

        wait_sync(printed, timeout=150, interval=0.2, what="the proxy URL printed", detail=lambda: lines)
        assert any(line.startswith("Gamma harness ready: " + proxy_url) for line in lines), lines

        embedded = [m.group(1) for line in lines if (m := re.search(r"embedded Redis at (redis://\S+)", line))]
        assert len(embedded) == 1, lines
        redis_url = embedded[0]
        assert redis_url != dead_redis and redis_answers(redis_url)
        assert (data / "redis").is_dir()  # the embedded Redis keeps its data in the data dir

        for name, port in ports.items():
            wait_ready(name, port, 30)
        for i in range(1, workers):  # the other runtime workers, each on a port of its own
            wait_ready(f"runtime worker {i + 1}", ports["runtime"] + 10 * i, 30)

        tree = descendants(proc.pid)
        supervisor = [pid for pid, cmd in tree.items() if "services.stack" in cmd]
        services = {name: [pid for pid, cmd in tree.items() if cmd.endswith(f"-m services.{name}")] for name in ports}
        redis_pids = [pid for pid, cmd in tree.items() if "redis-server" in cmd]
        assert len(supervisor) == 1, tree
        assert all(len(pids) == (workers if name == "runtime" else 1) for name, pids in services.items()), tree
        assert len(redis_pids) == 1, tree

        os.kill(supervisor[0], signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "stderr.log").read_text()[-3000:]
        wait_sync(lambda: not any(alive(pid) for pid in tree), timeout=10,
                  what="every child gone", detail=lambda: [tree[pid] for pid in tree if alive(pid)])
        assert not redis_answers(redis_url)
        for port in ports.values():
            assert readyz(port) == 0
    finally:
        for pid in {**tree, **descendants(proc.pid)}:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_fixtures_start_a_redis_server_when_nothing_answers_at_redis_url(tmp_path: Path) -> None:
    """The test fixtures' path for a machine without a running Redis: `redis-server` from PATH is
    started on a free port for the run and stopped when the run ends."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing("redis-server is not on PATH")
    dead = f"redis://127.0.0.1:{free_port()}/0"
    script = (
        "import redis\n"
        "from tests.support.redis_server import base_redis_url\n"
        "url = base_redis_url()\n"
        "client = redis.Redis.from_url(url + '/0')\n"
        "print(url, client.ping(), client.info('server')['executable'], flush=True)\n"
    )
    env = dict(os.environ, REDIS_URL=dead)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    url, pong, executable = out.stdout.split()
    assert pong == "True"
    assert url.startswith("redis://127.0.0.1:") and url != dead.rsplit("/", 1)[0]
    assert not url.endswith(":6379")  # never falls back to some other Redis when REDIS_URL is set
    assert os.path.realpath(executable) == os.path.realpath(binary)
    wait_sync(lambda: not redis_answers(url), timeout=10, what="the embedded Redis stopped with the test process")


def test_children_die_with_a_killed_supervisor(tmp_path: Path, redis_url: str) -> None:
    """The other Redis path (REDIS_URL answers: no embedded Redis), and `kill -9` of the stack runner
    (no chance to clean up): every service still goes, because each child asked Linux for SIGTERM on
    its parent's death."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux-only")
    ports = {name: free_port() for name in PORT_VARS}
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "MAKEFLAGS")}
    env.update({var: str(ports[name]) for name, var in PORT_VARS.items()})
    env.update({var: str(free_port()) for var in INTERNAL_PORT_VARS.values()})  # /metrics of proxy, notifications
    env.update(REDIS_URL=redis_url, GAMMA_DATA_DIR=str(tmp_path / "data"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "services.stack"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    tree: dict[int, str] = {}
    try:
        assert proc.stdout is not None
        printed = []
        while not any(f"127.0.0.1:{ports['proxy']}/" in line for line in printed):
            line = proc.stdout.readline()  # bounded by pytest-timeout if the stack hangs
            assert line, f"the stack exited before it was ready: {printed}"
            printed.append(line)
        assert not any("embedded Redis" in line for line in printed), printed  # REDIS_URL answered
        assert readyz(ports["proxy"]) == 200
        tree = descendants(proc.pid)
        for name in PORT_VARS:
            assert any(cmd.endswith(f"-m services.{name}") for cmd in tree.values()), tree
        assert not any("redis-server" in cmd for cmd in tree.values()), tree  # REDIS_URL answered
        proc.kill()
        proc.wait(timeout=10)
        wait_sync(lambda: not any(alive(pid) for pid in tree), timeout=40, interval=0.2,
                  what="every child gone", detail=lambda: [tree[pid] for pid in tree if alive(pid)])
    finally:
        for pid in {**tree, **descendants(proc.pid)}:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
