"""A real Redis Cluster on loopback for tests: 3 primaries + 3 replicas (`redis-server
--cluster-enabled yes`, joined by `redis-cli --cluster create ... --cluster-replicas 1`).

A cluster has only db 0, so tests on it cannot take a db of their own as tests/conftest.py does:
`flushall` empties every primary (each module that shares a cluster calls it first; replicas follow).
The node timeout is short (2 s) so a killed primary's replica is promoted within seconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from services.stack import redis_server_binary

NODES = 6
NODE_TIMEOUT_MS = 2000


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port(start: int = 7200, stop: int = 7990) -> int:
    """Six consecutive free ports whose cluster-bus ports (+10000) are free too."""
    for base in range(start + (os.getpid() % 50) * 8, stop, NODES):
        ports = [base + i for i in range(NODES)]
        if all(_port_free(p) and _port_free(p + 10000) for p in ports):
            return base
    raise RuntimeError("no free ports for a local Redis Cluster")


def cluster_tools() -> tuple[str, str] | None:
    server, cli = redis_server_binary(), shutil.which("redis-cli")
    return (server, cli) if server and cli else None


@dataclass
class LocalCluster:
    base_port: int = 0
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gamma-cluster-")))
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def ports(self) -> list[int]:
        return [self.base_port + i for i in range(NODES)]

    @property
    def url(self) -> str:
        """Any node will do: the clients discover the others."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self, timeout_s: float = 60.0) -> LocalCluster:
        tools = cluster_tools()
        if tools is None:
            raise RuntimeError("redis-server and redis-cli are needed for a local cluster")
        server, cli = tools
        self.base_port = self.base_port or free_base_port()
        for port in self.ports:
            self._start_node(server, port)
        for port in self.ports:
            self._wait(lambda p=port: self.client(p).ping(), timeout_s)
        subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout_s)
        self.wait_ok(timeout_s)
        return self

    def _start_node(self, server: str, port: int) -> None:
        node_dir = self.directory / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", str(node_dir / "nodes.conf"), "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
             "--save", "", "--appendonly", "no", "--dir", str(node_dir), "--logfile", str(node_dir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    @staticmethod
    def client(port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2.0, socket_connect_timeout=2.0)

    def _wait(self, check: object, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(redis.RedisError, OSError):
                if check():  # type: ignore[operator]
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"local cluster not ready after {timeout_s}s ({self.directory})")
            time.sleep(0.1)

    def alive(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def info(self, port: int) -> dict[str, str]:
        with contextlib.closing(self.client(port)) as c:
            raw = c.execute_command("CLUSTER", "INFO")
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def primaries(self) -> list[int]:
        """Ports of the live primaries that hold slots."""
        out = []
        for port in self.alive():
            with contextlib.suppress(redis.RedisError, OSError), contextlib.closing(self.client(port)) as c:
                role = c.execute_command("ROLE")[0]
                if (role.decode() if isinstance(role, bytes) else role) == "master":
                    out.append(port)
        return out

    def wait_ok(self, timeout_s: float = 60.0) -> None:
        """Every live node says cluster_state:ok and three primaries serve the slots."""
        def ok() -> bool:
            return (all(self.info(p).get("cluster_state") == "ok" for p in self.alive())
                    and len(self.primaries()) == NODES // 2)
        self._wait(ok, timeout_s)

    def wait_replicas_synced(self, timeout_s: float = 60.0) -> None:
        """Every live replica has its primary's data: a replica that never synced (a cluster just
        created) refuses to be promoted when its primary dies."""
        def synced() -> bool:
            for port in self.alive():
                with contextlib.closing(self.client(port)) as c:
                    info = c.info("replication")
                if info.get("role") == "slave" and info.get("master_link_status") != "up":
                    return False
            return True
        self._wait(synced, timeout_s)

    def primary_of(self, key: str) -> int:
        with contextlib.closing(self.client(self.primaries()[0])) as c:
            slot = int(c.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    return int(primary[1])
        raise RuntimeError(f"no primary holds {key!r}")

    def kill(self, port: int) -> None:
        """kill -9 of one node."""
        proc = self.procs[port]
        proc.kill()
        proc.wait(timeout=10)

    def flushall(self) -> None:
        for port in self.primaries():
            with contextlib.closing(self.client(port)) as c:
                c.flushall()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.procs.clear()
        shutil.rmtree(self.directory, ignore_errors=True)
