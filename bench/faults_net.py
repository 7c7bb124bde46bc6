"""`make bench-faults` (network half): prompt -> answer latency with 0 and with 50 ms of Redis latency,
side by side in one run.

Every service reaches Redis through one fault proxy process (tests/support/faultproxy.py, started with
`--toggle-latency-ms`: SIGUSR1 switches it between 0 and 50 ms each way, ±`--jitter-ms`), so both
phases take the same path and only the latency differs. The phases alternate (0, 50, 0, 50, ...) so
the machine's other load falls on both alike. `--sessions` sessions each prompt, wait for the answer
(its time from the transcript entry, not from polling), think `--think-s`, and prompt again.
Writes bench/results/faults_net.json: p50/p99 per phase kind and the ratio 50 ms / 0 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.soak_report import p99  # noqa: E402
from tests.reliability.workload import LoadClient, SessionRecord  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, SERVICE_TOKEN, Stack  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def p50(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def start_link(redis_port: int, latency_ms: float, jitter_ms: float, lifetime_s: float) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.faultproxy", "--upstream", f"127.0.0.1:{redis_port}",
         "--latency-ms", "0", "--toggle-latency-ms", str(latency_ms), "--jitter-ms", str(jitter_ms),
         "--lifetime-s", str(lifetime_s)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "listening 127.0.0.1:PORT -> ..."
    port = int(line.split()[1].rsplit(":", 1)[1])
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain its toggle lines
    return proc, port


class Phases:
    """Which phase is on: toggled by the driver, read when a prompt is sent."""

    def __init__(self, link: subprocess.Popen[str], phase_s: float, count: int) -> None:
        self.link, self.phase_s, self.count = link, phase_s, count
        self.current = "0ms"
        self.stop = threading.Event()

    def run(self) -> None:
        for i in range(self.count):
            if self.stop.wait(self.phase_s):
                return
            if i < self.count - 1:
                self.link.send_signal(signal.SIGUSR1)
                self.current = "50ms" if self.current == "0ms" else "0ms"
        self.stop.set()


async def session(client: LoadClient, phases: Phases, think_s: float, out: dict[str, list[float]], i: int) -> None:
    await asyncio.sleep(i * 0.1)
    rec: SessionRecord = await client.create_session()
    n = 0
    while not phases.stop.is_set():
        phase = phases.current
        p = await client.prompt(rec, f"{rec.sid}:{n}")
        if await client.wait_answer(rec, p) and p.answered_at is not None and phase == phases.current:
            out[phase].append(p.answered_at - p.sent_at)  # a prompt that straddled a switch counts nowhere
        n += 1
        await asyncio.sleep(think_s)


def run(sessions: int, phase_s: float, phases: int, latency_ms: float, jitter_ms: float, think_s: float) -> dict[str, Any]:
    url, redis_proc = start_redis_server()
    link, port = start_link(int(url.rsplit(":", 1)[1]), latency_ms, jitter_ms, phase_s * phases + 300)
    work = Path(tempfile.mkdtemp(prefix="gamma-faults-net-"))
    stack = Stack(redis_url=f"redis://127.0.0.1:{port}/0", data_dir=work / "data", env_overrides={"GAMMA_IDLE_S": "120"})
    (work / "data").mkdir(parents=True, exist_ok=True)
    out: dict[str, list[float]] = {"0ms": [], "50ms": []}
    client = LoadClient(stack.url("proxy"), stack.url("notifications"), API_TOKEN, SERVICE_TOKEN,
                        request_deadline_s=60, answer_timeout_s=60, poll_s=0.2, max_poll_s=0.5)
    driver = Phases(link, phase_s, phases)
    try:
        stack.start()
        threading.Thread(target=driver.run, daemon=True).start()

        async def main() -> None:
            try:
                await asyncio.gather(*(session(client, driver, think_s, out, i) for i in range(sessions)))
            finally:
                await client.aclose()

        asyncio.run(main())
    finally:
        driver.stop.set()
        stack.stop()
        link.terminate()
        redis_proc.terminate()
    rows = {k: {"prompts": len(v), "p50_s": round(p50(v), 4), "p99_s": round(p99(v), 4)} for k, v in out.items()}
    base, slow = rows["0ms"], rows["50ms"]
    return {"sessions": sessions, "phase_s": phase_s, "phases": phases, "latency_ms": latency_ms, "jitter_ms": jitter_ms,
            "think_s": think_s, "results": rows,
            "ratio": {"p50": round(slow["p50_s"] / base["p50_s"], 2) if base["p50_s"] else None,
                      "p99": round(slow["p99_s"] / base["p99_s"], 2) if base["p99_s"] else None},
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--phase-s", type=float, default=30.0)
    parser.add_argument("--phases", type=int, default=6)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--jitter-ms", type=float, default=5.0)
    parser.add_argument("--think-s", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=RESULTS / "faults_net.json")
    args = parser.parse_args(argv)
    result = run(args.sessions, args.phase_s, args.phases, args.latency_ms, args.jitter_ms, args.think_s)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print("| Redis latency | prompts | p50 s | p99 s |\n|---|---|---|---|")
    for kind, row in result["results"].items():
        print(f"| {kind} | {row['prompts']} | {row['p50_s']} | {row['p99_s']} |")
    print(f"ratio 50ms/0ms: p50 x{result['ratio']['p50']}, p99 x{result['ratio']['p99']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
