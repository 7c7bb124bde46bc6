"""Request heads are capped (bytes and header fields) on the service ports: 431, and a
hostile head does not grow the server's memory.

Before: a 16 MiB header got 200, and four unfinished 64 MiB header lines took the proxy from 84 to
399 MiB. Raw sockets: an HTTP client library would refuse to send such heads.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(120)
MAX_HEAD = 64 * 1024  # GAMMA_MAX_HEADER_BYTES's default


def port(stack: Stack, name: str) -> int:
    return stack.ports[name]


def status_of(response: bytes) -> int:
    assert response.startswith(b"HTTP/1.1 "), response[:200]
    return int(response.split(b" ", 2)[1])


def read_response(sock: socket.socket, timeout_s: float = 10) -> bytes:
    sock.settimeout(timeout_s)
    data = b""
    with contextlib.suppress(ConnectionResetError, TimeoutError):
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        data = head + b"\r\n\r\n" + body
    return data


def send_head_slowly(stack: Stack, service: str, head: bytes, chunk: int = 16 * 1024) -> bytes:
    """Send `head` a chunk at a time and stop as soon as the server answers (it may close early)."""
    with socket.create_connection(("127.0.0.1", port(stack, service)), timeout=10) as sock:
        for at in range(0, len(head), chunk):
            try:
                sock.sendall(head[at:at + chunk])
            except (BrokenPipeError, ConnectionResetError):
                break
            if select.select([sock], [], [], 0.005)[0]:
                break
        return read_response(sock)


def request(path: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("service", ["proxy", "notifications"])
def test_oversized_heads_get_431(module_stack: Stack, service: str) -> None:
    huge = request("/healthz", [("X-Big", "a" * (16 * 1024 * 1024))])
    answer = send_head_slowly(module_stack, service, huge)
    assert status_of(answer) == 431, answer[:300]
    assert b"GAMMA_MAX_HEADER_BYTES" in answer
    # A head over the cap that arrives in one piece (one write; the server may read it at once).
    with socket.create_connection(("127.0.0.1", port(module_stack, service)), timeout=10) as sock:
        sock.sendall(request("/healthz", [("X-Big", "b" * (MAX_HEAD + 1024))]))
        answer = read_response(sock)
    assert status_of(answer) == 431, answer[:300]
    many = request("/healthz", [(f"X-H{i}", "v") for i in range(150)])
    answer = send_head_slowly(module_stack, service, many)
    assert status_of(answer) == 431 and b"GAMMA_MAX_HEADERS" in answer, answer[:300]


def test_heads_under_the_cap_are_served_on_one_connection(module_stack: Stack) -> None:
    """The cap is per request: three 40 KiB heads on one keep-alive connection (120 KiB in all) pass."""
    with socket.create_connection(("127.0.0.1", port(module_stack, "proxy")), timeout=10) as sock:
        for i in range(3):
            sock.sendall(request("/sessions", [("Authorization", f"Bearer {API_TOKEN}"),
                                               ("Cookie", f"c{i}=" + "x" * (40 * 1024))]))
            answer = read_response(sock)
            assert status_of(answer) == 200, answer[:300]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def flood_unfinished_header(stack: Stack, total: int, seconds: float, sent: list[int]) -> None:
    """One header line that never ends (no token, no CRLF), as fast as the server takes it."""
    deadline = time.monotonic() + seconds
    block = b"a" * (256 * 1024)
    with socket.create_connection(("127.0.0.1", port(stack, "proxy")), timeout=2) as sock:
        try:
            sock.sendall(b"GET /sessions HTTP/1.1\r\nHost: x\r\nX-Flood: ")
            done = 0
            while done < total and time.monotonic() < deadline:
                sock.sendall(block)
                done += len(block)
        except OSError:
            done = -1  # the server closed the connection
        sent.append(done)


def test_unfinished_giant_header_lines_do_not_grow_the_proxy(module_stack: Stack) -> None:
    pid = module_stack.procs["proxy"].pid
    before = rss_kib(pid)
    sent: list[int] = []
    floods = [threading.Thread(target=flood_unfinished_header, args=(module_stack, 64 * 1024 * 1024, 4.0, sent))
              for _ in range(4)]
    for t in floods:
        t.start()
    peak = before
    while any(t.is_alive() for t in floods):
        peak = max(peak, rss_kib(pid))
        time.sleep(0.05)
    for t in floods:
        t.join()
    assert sent == [-1] * 4, f"the proxy kept reading unfinished heads: {sent}"
    assert peak - before < 16 * 1024, f"proxy RSS {before} -> {peak} KiB"
