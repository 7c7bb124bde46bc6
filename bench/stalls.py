"""`make bench-stalls`: another tenant's round trip while one tenant attacks what the services share
(docs/architecture.md "Bounded work").

One stack (one runtime worker, one proxy). Bob, in his own session, sends prompts one after another
(`script:` a `message_user` that yields: proxy -> runtime -> the scripted model -> transcript) and
times each from the POST to the run's `agent_end` on his session's event stream, beside the proxy's
`GET /sessions/{id}`. Each attack runs in a loop in a process of its own (an attacker's client shares no
interpreter with bob's stopwatch) while bob measures; before it, bob measures the quiet stack. Attacks (alice):
- connector `uniqueItems`: a call whose array holds 4,500 objects (duplicate last: every pair compared);
- connector `pattern`: 46 characters against `^(a|aa)+$`;
- deep PNG attachments x6: six messages at once, each attaching a distinct 7000x7000 16-bit PNG (~0.3 MB);
- corrupt PNG: distinct truncated 49 M-pixel PNGs attached, one after another;
- WebP bomb: the 1.9 KB 7000x7000 WebP attached;
- parallel reads: one step of five `read`s of a deep PNG and a `show_file look` of the WebP.
Beside them two controls, not attacks, each the harmless twin of attacks (the same prompts, model calls
and tool calls, small inputs), run back to back: what any busy neighbour costs on the same cores.
"control: busy neighbour" is the three-step connector prompt with a small argument (the twin of the
connector attacks and, for want of a closer one, of the attachment attacks, which the proxy refuses);
"control: small reads" the parallel reads' two steps on a small text file. Target: bob's round-trip p99
under attack <= 2x quiet; beside it, the attack's p99 over its twin's (`p99_vs_control`): on two shared
cores the twin alone doubles bob's p99, so over-quiet measures the machine as much as the attack. Each
phase starts alice in a new session with her files: an attack's figures are its own, not the
transcript the attacks before it left (a long history costs every model call). The machine is shared,
so each attack is measured in `--pairs` alternating pairs (quiet, then attack), and the ratio is of the
p99s pooled over all pairs' rounds (each pair's own ratio beside it). `--model-server` runs the scripted
model as its own process (scripted/server.py), as a provider is: in process (the default, as the tests
run it), its parsing and checking of alice's requests run on the runtime's loop, which no provider's
would. Beside the round trips, the runtime process's CPU per attack (bob's share taken out), steadier
than a p99 on a shared host. Prints a table; writes bench/results/stalls.json. Run it under the machine lock
(`flock /tmp/gamma-bench.lock make bench-stalls`). Not a timed test.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.model_server import start_model_server  # noqa: E402
from tests.support.bombs import WEBP_7000, png_of_zeros  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, OTHER_TOKEN, SERVICE_TOKEN, Stack  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "stalls.json"
TARGET_RATIO = 2.0
BUSY, READS = "control: busy neighbour", "control: small reads"
TWIN = {"parallel reads": READS}  # an attack's harmless twin; BUSY for the others


def script(*steps: dict[str, Any]) -> str:
    return "script:" + json.dumps(list(steps), separators=(",", ":"))


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments}


DONE = {"tool_calls": [call("message_user", message="done", blockOnUser=True)]}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


class Tenant:
    def __init__(self, base_url: str, token: str, sid: str = "") -> None:
        self.base_url, self.token = base_url, token
        self.http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=600)
        self.sid, self.cursor, self.seen = sid, "0", 0
        if not sid:
            self.fresh()

    def fresh(self) -> None:
        """A new session: the transcript polled stays short, so the probe's own cost does not grow."""
        self.sid = self.http.post("/sessions", json={}).json()["id"]
        self.cursor, self.seen = "0", 0

    def answers(self) -> int:
        """message_user results so far, reading only the entries after the last read."""
        while True:
            page = self.http.get(f"/sessions/{self.sid}/transcript", params={"cursor": self.cursor}).json()
            self.seen += sum(1 for e in page["entries"] if e["type"] == "message"
                             and e["message"]["role"] == "toolResult" and e["message"]["toolName"] == "message_user")
            self.cursor = page.get("next_cursor") or self.cursor
            if not page["has_more"]:
                return self.seen

    def prompt(self, message: str, **body: Any) -> httpx.Response:
        return self.http.post(f"/sessions/{self.sid}/messages", json={"message": message, **body})

    def round_trip(self, message: str, deadline_s: float = 600) -> float:
        """ms from the POST to the answer in the transcript (and the run over)."""
        before = self.answers()
        began = time.perf_counter()
        resp = self.prompt(message)
        assert resp.status_code == 202, resp.text
        while time.perf_counter() - began < deadline_s:
            if self.answers() > before and not self.http.get(f"/sessions/{self.sid}").json().get("running"):
                return (time.perf_counter() - began) * 1000
            time.sleep(0.01)
        raise TimeoutError("no answer")


class Listener(Tenant):
    """Bob: a browser's view of a round trip, the POST to the run's `agent_end` on the session's event
    stream (a thread reads it). Polling the transcript instead timed the poll (10 ms steps, and each
    poll's two requests slowed with the load measured) as much as the round trip."""

    listening: httpx.Response | None = None

    def fresh(self) -> None:
        if self.listening is not None:
            self.listening.close()  # one open stream: a user's are capped (GAMMA_SSE_MAX_STREAMS_PER_USER)
        super().fresh()
        self.ends, self.changed, self.listening = 0, threading.Condition(), None
        threading.Thread(target=self._listen, args=(self.sid, self.changed), daemon=True).start()
        with self.changed:  # subscribed before the first prompt: no end is missed
            if not self.changed.wait_for(lambda: self.listening is not None, timeout=30):
                raise TimeoutError("event stream not open")

    def _listen(self, sid: str, changed: threading.Condition) -> None:
        headers = {"Authorization": f"Bearer {self.token}", "Last-Event-ID": "$"}
        with contextlib.suppress(httpx.HTTPError, RuntimeError), httpx.stream(
                "GET", f"{self.base_url}/sessions/{sid}/events", headers=headers, timeout=None) as resp:
            with changed:
                self.listening = resp
                changed.notify_all()
            for line in resp.iter_lines():
                if line.startswith("data: ") and '"agent_end"' in line:
                    with changed:
                        self.ends += 1
                        changed.notify_all()

    def round_trip(self, message: str, deadline_s: float = 600) -> float:
        with self.changed:
            before = self.ends
        began = time.perf_counter()
        resp = self.prompt(message)
        assert resp.status_code == 202, resp.text
        with self.changed:
            if not self.changed.wait_for(lambda: self.ends > before, timeout=deadline_s):
                raise TimeoutError("no answer")
        return (time.perf_counter() - began) * 1000


def summary(trips: list[float], gets: list[float]) -> dict[str, Any]:
    # At 90 rounds a side the p99 is the slowest round: one pause anywhere on the host sets it, so the
    # p95 (the fifth slowest) goes beside it.
    return {"round_trip_p50_ms": pct(trips, 0.5), "round_trip_p95_ms": pct(trips, 0.95), "round_trip_p99_ms": pct(trips, 0.99),
            "round_trip_max_ms": pct(trips, 1.0), "get_p99_ms": pct(gets, 0.99), "rounds": len(trips)}


def cpu_ms(pid: int) -> float:
    """A process's CPU time so far (user + system, all its threads; not its children), ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def measure(bob: Listener, rounds: int, cpu: Callable[[], float] = lambda: 0.0) -> dict[str, Any]:
    bob.fresh()
    spent = cpu()
    trips: list[float] = []
    gets: list[float] = []
    for i in range(rounds):
        trips.append(bob.round_trip(script({"tool_calls": [call("message_user", message=f"pong {i}",
                                                                      blockOnUser=True)]})))
        began = time.perf_counter()
        bob.http.get(f"/sessions/{bob.sid}")
        gets.append((time.perf_counter() - began) * 1000)
    return {**summary(trips, gets), "trips": trips, "gets": gets, "cpu_ms": cpu() - spent}


def register(stack: Stack, name: str, prop: dict[str, Any]) -> None:
    spec = {"description": "bench", "tools": [{"name": "put", "description": "takes v", "timeout_s": 5, "parameters": {
        "type": "object", "properties": {"v": prop}, "required": ["v"]}}]}
    resp = httpx.put(f"{stack.url('notifications')}/connectors/{name}", json=spec,
                     headers={"Authorization": f"Bearer {SERVICE_TOKEN}"}, timeout=30)
    assert resp.status_code == 200, resp.text


def put(t: Tenant, path: str, data: bytes) -> None:
    resp = t.http.put(f"/sessions/{t.sid}/workspace/files/{path}", content=data)
    assert resp.status_code == 200, resp.text


def stage(alice: Tenant, files: dict[str, bytes]) -> None:
    """Alice in a new session with the attacks' files in its workspace."""
    alice.fresh()
    for path, data in files.items():
        put(alice, path, data)


def connectors(stack: Stack) -> None:
    register(stack, "bulk", {"type": "array", "uniqueItems": True, "items": {"type": "object"}})
    register(stack, "regex", {"type": "string", "pattern": "^(a|aa)+$"})


def attacks(alice: Tenant, first: int = 0) -> dict[str, Callable[[int], Any]]:
    """Alice's attacks by name; `first` numbers the corrupt PNGs (a refusal is remembered by the bytes'
    digest, so each phase starts where the last one's numbers cannot reach)."""

    def connector(name: str, value: Any) -> Callable[[int], Any]:
        return lambda n: alice.round_trip(script({"tool_calls": [call("load_tools", namespace=f"connector:{name}")]},
                                                 {"tool_calls": [call(f"{name}__put", v=value)]}, DONE))

    def deep(n: int) -> Any:
        with ThreadPoolExecutor(6) as pool:
            return list(pool.map(lambda i: alice.prompt("look", attachments=[f"deep{i}.png"]).status_code, range(6)))

    distinct = itertools.count(first)

    def corrupt(n: int) -> Any:
        k = next(distinct)
        put(alice, "broken.png", png_of_zeros(7000 - k % 500, 7000, colour=0, depth=8, truncate=True))
        return alice.prompt("look", attachments=["broken.png"]).status_code

    def reads(path: str, shown: str) -> Callable[[int], Any]:
        step = [call("read", path=path) for _ in range(5)] + [call("show_file", path=shown, look=True)]
        return lambda n: alice.round_trip(script({"tool_calls": step}, DONE))

    return {
        # Not attacks: the same prompts with small inputs, back to back, so the figures tell an
        # attack's cost from that of any busy neighbour on the same cores.
        BUSY: connector("regex", 123),
        READS: reads("notes.txt", "notes.txt"),
        "connector uniqueItems": connector("bulk", [{"a": i} for i in range(4_500)] + [{"a": 0}]),
        "connector pattern": connector("regex", "a" * 45 + "!"),
        "deep PNG attachments x6": deep,
        "corrupt PNG": corrupt,
        "WebP bomb": lambda n: alice.prompt("look", attachments=["bomb.webp"]).status_code,
        "parallel reads": reads("deep0.png", "bomb.webp"),
    }


def files() -> dict[str, bytes]:
    out = {f"deep{i}.png": png_of_zeros(7000 - i, 7000, colour=2, depth=16) for i in range(6)}
    return {**out, "bomb.webp": WEBP_7000, "notes.txt": b"".join(b"line %d\n" % i for i in range(40))}


def alice_loop(base_url: str, token: str, sid: str, name: str, first: int, ready: Any, stop: Any, done: Any) -> None:
    """The attack in a loop, in a process of its own: alice's client (its JSON, its polling) must not
    share a GIL with bob's stopwatch, as no attacker's client shares one with another user's."""
    alice = Tenant(base_url, token, sid)
    attack = attacks(alice, first)[name]
    ready.set()
    while not stop.is_set():
        attack(done.value)
        with done.get_lock():
            done.value += 1


PHASES = itertools.count()


def under_attack(bob: Listener, alice: Tenant, name: str, rounds: int,
                 reset: Callable[[], None] = lambda: None, cpu: Callable[[], float] = lambda: 0.0) -> dict[str, Any]:
    reset()
    spawn = multiprocessing.get_context("spawn")
    ready, stop, done = spawn.Event(), spawn.Event(), spawn.Value("i", 0)
    worker = spawn.Process(target=alice_loop, daemon=True, args=(
        alice.base_url, alice.token, alice.sid, name, next(PHASES) * 100_000, ready, stop, done))
    worker.start()
    if not ready.wait(60):
        worker.kill()
        raise RuntimeError("alice's process did not start")
    spent = cpu()
    try:
        row = measure(bob, rounds)
    finally:
        stop.set()
        worker.join(timeout=900)
    return {**row, "attacks": done.value, "cpu_ms": cpu() - spent}  # up to the last attack's end


def paired(bob: Listener, alice: Tenant, name: str, rounds: int, pairs: int,
           reset: Callable[[], None] = lambda: None, cpu: Callable[[], float] = lambda: 0.0) -> dict[str, Any]:
    """`pairs` alternating (quiet, attack) phases: pooled figures of each side, each pair's ratio, and
    the runtime's CPU per attack (its CPU over the attack phases, less bob's rounds at their quiet cost):
    what alice's prompts cost the process every session on it shares, which the round trips show only
    through the noise of a shared host."""
    quiet: dict[str, list[float]] = {"trips": [], "gets": []}
    loud: dict[str, list[float]] = {"trips": [], "gets": []}
    ratios, attacks_done, quiet_cpu, loud_cpu = [], 0, 0.0, 0.0
    for _ in range(pairs):
        q, a = measure(bob, rounds, cpu), under_attack(bob, alice, name, rounds, reset, cpu)
        quiet_cpu, loud_cpu = quiet_cpu + q["cpu_ms"], loud_cpu + a["cpu_ms"]
        for side, row in ((quiet, q), (loud, a)):
            side["trips"] += row["trips"]
            side["gets"] += row["gets"]
        ratios.append(round(a["round_trip_p99_ms"] / q["round_trip_p99_ms"], 2))
        attacks_done += a["attacks"]
    q_row, a_row = summary(quiet["trips"], quiet["gets"]), summary(loud["trips"], loud["gets"])
    ratio = round(a_row["round_trip_p99_ms"] / q_row["round_trip_p99_ms"], 2)
    per_round = quiet_cpu / max(1, len(quiet["trips"]))
    alice = (loud_cpu - per_round * len(loud["trips"])) / max(1, attacks_done)
    return {"quiet": q_row, "attack": {**a_row, "attacks": attacks_done}, "p99_ratio": ratio,
            "runtime_cpu_ms_per_bob_round": round(per_round, 1), "runtime_cpu_ms_per_attack": round(alice, 1),
            "p95_ratio": round(a_row["round_trip_p95_ms"] / q_row["round_trip_p95_ms"], 2),
            "pair_ratios": ratios, "within_target": ratio <= TARGET_RATIO}


def chosen(names: list[str], only: list[str]) -> list[str]:
    """The attacks `--only` names, each with its twin control (run first: the ratio needs it)."""
    if not only:
        return names
    picked = [n for n in names if any(o.lower() in n.lower() for o in only)]
    twins = {TWIN.get(n, BUSY) for n in picked if not n.startswith("control")}
    return [n for n in names if n in picked or n in twins]


def run(work: Path, redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    server, server_env = start_model_server() if args.model_server else (None, {})
    stack = Stack(redis_url=redis_url, data_dir=work / "data", log_dir=work / "logs", src=args.src,
                  env_overrides={"GAMMA_DYNAMIC_TOOLS": "1", "GAMMA_IDLE_S": "600", **server_env})
    rows: dict[str, Any] = {}
    try:
        stack.start()
        alice, bob = Tenant(stack.url(), API_TOKEN), Listener(stack.url(), OTHER_TOKEN)
        measure(bob, 3)  # warm: the session live, the pools started
        connectors(stack)
        data = files()
        for name in chosen(list(attacks(alice)), args.only):
            row = paired(bob, alice, name, args.rounds, args.pairs, reset=lambda: stage(alice, data),
                         cpu=lambda: cpu_ms(stack.procs["runtime"].pid))
            loud = row["attack"]
            twin = None if name.startswith("control") else TWIN.get(name, BUSY)
            control = rows.get(twin or "", {}).get("attack", {})
            rows[name] = {**row, "control": twin, **{
                f"{q}_vs_control": round(loud[f"round_trip_{q}_ms"] / control[f"round_trip_{q}_ms"], 2) if control else None
                for q in ("p95", "p99")}}
            print(f"{name:<24} quiet p99 {row['quiet']['round_trip_p99_ms']:>8} ms  attack p99 "
                  f"{loud['round_trip_p99_ms']:>8} ms  x{row['p99_ratio']:<5} pairs {row['pair_ratios']} "
                  f"vs control {rows[name]['p99_vs_control']} ({loud['attacks']} attacks, runtime "
                  f"{row['runtime_cpu_ms_per_attack']} ms each)", flush=True)
    finally:
        stack.stop()
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="bob's round trips per phase")
    parser.add_argument("--pairs", type=int, default=3, help="alternating (quiet, attack) pairs per attack")
    parser.add_argument("--src", type=Path, default=None, help="run the services from another tree (a before figure)")
    parser.add_argument("--only", action="append", default=[], help="attacks whose name holds this (repeatable)")
    parser.add_argument("--model-server", action="store_true",
                        help="the scripted model as its own process (a provider's work off the runtime's loop)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gamma-bench-stalls-") as tmp:
        url, server = start_redis_server(data_dir=tmp)
        try:
            rows = run(Path(tmp), f"{url}/1", args)
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(f"\n{'attack':<24} {'quiet p50/p95/p99':>18} {'attack p50/p95/p99':>19} {'p99 ratio':>9} {'p95 ratio':>9} "
          f"{'vs control p95/p99':>18} {'attacks':>8} {'runtime ms/attack':>17}  pair ratios")
    for name, r in rows.items():
        q, a = r["quiet"], r["attack"]
        qs, ats = (f"{x['round_trip_p50_ms']}/{x['round_trip_p95_ms']}/{x['round_trip_p99_ms']}" for x in (q, a))
        print(f"{name:<24} {qs:>18} {ats:>19} {r['p99_ratio']:>9} {r['p95_ratio']:>9} "
              f"{str(r['p95_vs_control']) + '/' + str(r['p99_vs_control']):>18} {a['attacks']:>8} "
              f"{r['runtime_cpu_ms_per_attack']:>17}  {r['pair_ratios']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "rounds": args.rounds, "pairs": args.pairs, "target_ratio": TARGET_RATIO, "src": str(args.src) if args.src else "this tree",
        "model": "scripted, own process" if args.model_server else "scripted, in the runtime's process",
        "machine": {"arch": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_at_end": os.getloadavg()},
        "attacks": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
