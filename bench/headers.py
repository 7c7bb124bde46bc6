"""Request-head cap side by side (`python bench/headers.py`): not a test, a measurement (docs/architecture.md "Limits on hostile input").

The proxy app served three ways, interleaved over rounds on one machine:
- `httptools`: uvicorn's default protocol, no cap on the request head (before);
- `bounded`: shared/serving/httplimits.py, httptools plus a 64 KiB / 100 field cap (what `serve` runs);
- `h11`: the pure-Python parser with `h11_max_incomplete_event_size` = 64 KiB (the alternative).

Per variant: keep-alive `GET /healthz` requests per second over 8 connections, with the headers a
browser sends (~700 bytes; the app's work is minimal so parsing is most of it), and the proxy's RSS
before and at its peak while 4 connections push one unfinished header line each (up to 64 MiB, at most
4 s). Writes bench/results/headers.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.stack import free_port  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402

ROUNDS = 4
LOAD_SECONDS = 3.0
CONNECTIONS = 8
SERVER = """
import sys, uvicorn
from services.proxy.app import create_app
from shared.serving.httplimits import bounded_http_protocol
variant, port = sys.argv[1], int(sys.argv[2])
extra = {"httptools": {"http": "httptools"}, "h11": {"http": "h11", "h11_max_incomplete_event_size": 65536},
         "bounded": {"http": bounded_http_protocol(65536, 100)}}[variant]
uvicorn.run(create_app(), host="127.0.0.1", port=port, log_level="error", access_log=False, log_config=None, **extra)
"""
REQUEST = (
    "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok-alice\r\n"
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36\r\n"
    "Accept: application/json, text/plain, */*\r\nAccept-Language: en-US,en;q=0.9\r\n"
    "Accept-Encoding: gzip, deflate, br\r\nConnection: keep-alive\r\nReferer: http://127.0.0.1/\r\n"
    "Cookie: " + "s=" + "x" * 300 + "\r\nX-Request-Id: 3f1c2a9e-1b2c-4d5e-8f90-123456789abc\r\n\r\n"
).encode()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def start(variant: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, variant, str(port)], env=env, cwd=ROOT)
    deadline = time.time() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(REQUEST)
                if s.recv(100).startswith(b"HTTP/1.1 200"):
                    return proc, port
        except OSError:
            pass
        if time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"{variant} did not start")
        time.sleep(0.1)


async def _client(port: int, stop_at: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done = 0
    while time.monotonic() < stop_at:
        writer.write(REQUEST)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        done += 1
    writer.close()
    counts.append(done)


async def throughput(port: int) -> float:
    counts: list[int] = []
    started = time.monotonic()
    await asyncio.gather(*(_client(port, started + LOAD_SECONDS, counts) for _ in range(CONNECTIONS)))
    return sum(counts) / (time.monotonic() - started)


def _flood(port: int, sent: list[int]) -> None:
    deadline, block, done = time.monotonic() + 4.0, b"a" * (256 * 1024), 0
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Flood: ")
            while done < 64 * 1024 * 1024 and time.monotonic() < deadline:
                sock.sendall(block)
                done += len(block)
        except OSError:
            pass
    sent.append(done)


def attack(proc: subprocess.Popen[bytes], port: int) -> dict[str, Any]:
    before, sent = rss_kib(proc.pid), []  # type: ignore[var-annotated]
    threads = [threading.Thread(target=_flood, args=(port, sent)) for _ in range(4)]
    for t in threads:
        t.start()
    peak = before
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_kib(proc.pid))
        time.sleep(0.05)
    return {"rss_before_mib": round(before / 1024, 1), "rss_peak_mib": round(peak / 1024, 1),
            "sent_before_close_mib": round(sum(sent) / 2**20, 1)}


def main() -> None:
    redis_url, redis_proc = start_redis_server()
    data = tempfile.mkdtemp(prefix="gamma-bench-headers-")
    env = dict(os.environ, REDIS_URL=redis_url + "/0", GAMMA_DATA_DIR=data, PYTHONPATH=str(ROOT))
    results: dict[str, list[dict[str, Any]]] = {"httptools": [], "bounded": [], "h11": []}
    try:
        for _ in range(ROUNDS):
            for variant, runs in results.items():
                proc, port = start(variant, env)
                try:
                    cpu = cpu_s(proc.pid)
                    rps = asyncio.run(throughput(port))
                    per_request = (cpu_s(proc.pid) - cpu) / (rps * LOAD_SECONDS)
                    runs.append({"requests_per_s": round(rps), "server_cpu_us_per_request": round(per_request * 1e6),
                                 **attack(proc, port)})
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
    finally:
        redis_proc.terminate()
    print(f"{'variant':10} {'req/s (each round)':24} {'server CPU us/request':24} "
          f"{'RSS before -> peak under attack (MiB)':40} MiB sent before the close")
    for variant, runs in results.items():
        rps = " ".join(str(r["requests_per_s"]) for r in runs)
        cpu = " ".join(str(r["server_cpu_us_per_request"]) for r in runs)
        rss = ", ".join(f"{r['rss_before_mib']} -> {r['rss_peak_mib']}" for r in runs)
        taken = " ".join(str(r["sent_before_close_mib"]) for r in runs)
        print(f"{variant:10} {rps:24} {cpu:24} {rss:40} {taken}")
    out = ROOT / "bench" / "results" / "headers.json"
    out.write_text(json.dumps({"rounds": ROUNDS, "connections": CONNECTIONS, "load_seconds": LOAD_SECONDS,
                               "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
