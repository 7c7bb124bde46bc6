"""Exports and forks in flight are bounded per user and per proxy process (services/proxy/edge/heavy.py):
past a bound the request gets 429 with Retry-After at once and changes nothing; an export holds its
slot until its archive is sent."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from services.proxy.edge.errors import ApiError
from services.proxy.edge.heavy import Gate, held
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, OTHER_TOKEN, Stack

pytestmark = pytest.mark.timeout(180)
FILE_BYTES = 1_000_000  # under the 1 MiB upload cap
FILES = 13  # ~13 MB of random bytes: more than the socket buffers hold of an export nobody reads


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_EXPORTS_PER_USER": "2", "GAMMA_EXPORTS_PER_PROCESS": "2"}


def _held_export(base: str, sid: str) -> socket.socket:
    """An export whose reader stops after its first bytes. A small receive buffer, set before the
    connection (it turns the kernel's autotuning off: loopback would otherwise take tens of MB), so
    that the archive cannot all leave the proxy while nobody reads: its slot stays held."""
    where = urlsplit(base)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.settimeout(30)
    sock.connect((where.hostname or "127.0.0.1", where.port or 80))
    sock.sendall(f"GET /sessions/{sid}/export HTTP/1.1\r\nHost: {where.netloc}\r\n"
                 f"Authorization: Bearer {API_TOKEN}\r\n\r\n".encode())
    head = sock.recv(1024)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return sock


def _session_with_files(api: httpx.Client) -> str:
    sid = str(api.post("/sessions").json()["id"])
    for i in range(FILES):
        resp = api.put(f"/sessions/{sid}/workspace/files/noise{i}.bin", content=os.urandom(FILE_BYTES))
        assert resp.status_code in (200, 201, 204), resp.text
    return sid


def test_exports_in_flight_are_bounded_per_user_and_per_process(api: httpx.Client, module_stack: Stack) -> None:
    sid = _session_with_files(api)
    with httpx.Client(base_url=module_stack.url(), headers={"Authorization": f"Bearer {OTHER_TOKEN}"},
                      timeout=30) as bob:
        bobs = str(bob.post("/sessions").json()["id"])
        streams: list[socket.socket] = []
        try:
            for _ in range(2):  # two exports held open, read no further than their first bytes
                streams.append(_held_export(module_stack.url(), sid))
            third = api.get(f"/sessions/{sid}/export")
            assert third.status_code == 429 and int(third.headers["Retry-After"]) >= 1, third.status_code
            assert "GAMMA_EXPORTS_PER_USER" in third.json()["error"]
            other = bob.get(f"/sessions/{bobs}/export")  # another user: the process's bound
            assert other.status_code == 429 and "GAMMA_EXPORTS_PER_PROCESS" in other.json()["error"], other.status_code
            streams.pop().close()
            wait_sync(lambda: bob.get(f"/sessions/{bobs}/export").status_code == 200, timeout=20, interval=0.1,
                      what="a slot freed by the closed export")
        finally:
            for s in streams:
                s.close()
    wait_sync(lambda: api.get(f"/sessions/{sid}/export").status_code == 200, timeout=20, interval=0.1,
              what="every slot free again")


def test_a_gate_counts_per_user_and_per_process_and_releases_once() -> None:
    gate = Gate("forks", per_user=1, per_process=2, setting="GAMMA_FORKS_PER_USER, GAMMA_FORKS_PER_PROCESS")
    with held(gate, "alice"):
        with pytest.raises(ApiError) as user_bound:
            gate.take("alice")
        assert user_bound.value.status == 429 and user_bound.value.headers == {"Retry-After": "2"}
        bob = gate.take("bob")
        with pytest.raises(ApiError):
            gate.take("carol")  # the process's bound
        bob.release()
        bob.release()  # a second release changes nothing
        assert gate.total == 1 and dict(gate.users) == {"alice": 1}
    assert gate.total == 0 and not gate.users

