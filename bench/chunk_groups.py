"""Where a streamed chunk's CPU goes, by frame group: `python bench/chunk_groups.py FILE [--us N]`.

Reads a py-spy `-f raw` profile of the runtime or the proxy taken while every session streams
(bench-stream `--py-spy`, `--py-spy-at` past the ramp) and puts each event-loop sample in the first
group whose frames it holds (the order below: a sample in the tick's EVALSHA is the tick's, not
redis-py's). With `--us` (the steady µs per chunk of the same run, `loads/0/steady/cpu_us_per_chunk`)
each group's share is also given in µs per chunk. Samples with no Python frame under the loop are
uvloop and the interpreter's own work (callbacks, syscalls, task switches, GC: `--perf` names them).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from bench.folded import LINE, function_of

# (group, any of these frame names), first match wins.
RUNTIME = (
    ("model read: emit (say -> agent -> recorder -> outbox -> sender queue)", ("_Reading.say", "Agent._track")),
    ("model read: httpx/aiohttp body iterators", ("Response.aiter_bytes",)),
    ("model read: SSE split, data lines", ("split_events", "data_of")),
    ("model read: gate wait", ("EventSender.wait",)),
    ("model read: json_reads own (orjson.loads per event)", ("json_reads",)),
    ("model read: consume own", ("ResponsesApi.consume", "ChatApi.consume")),
    ("tick: EVALSHA of the XADDs (pack, write, reply)", ("EventSender._script", "EventSender._pipeline")),
    ("tick: take, event JSON, locks, fences", ("EventSender._tick_loop", "EventSender._send_urgent")),
    ("aiohttp data_received (a TCP segment: a token)", ("ResponseHandler.data_received",)),
    ("GC policy", ("heap_freezer",)),
    ("housekeeping, inbox reads", ("Worker._house_loop", "StreamBatchSubscriber", "InboxReader", "Worker._read_loop")),
)
PROXY = (
    ("SSE write to the client (uvicorn send, middleware)", ("StreamingResponse.stream_response",
                                                            "EventStreamResponse.stream_response")),
    ("fan-out XREAD (send, reply parse)", ("StreamReader._run", "StreamReader._read_shard", "StreamReader.read")),
    ("fan-out deliver to queues", ("EventFanout._deliver",)),
    ("fan-out heartbeats", ("EventFanout._beat",)),
    ("GC policy", ("heap_freezer",)),
)
LOOP = "uvloop / interpreter (no Python frame under the loop)"


def groups(path: Path, table: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[int, Counter[str]]:
    total, out = 0, Counter[str]()
    for line in path.read_text().splitlines():
        m = LINE.match(line)
        if m is None or "_bootstrap" in m.group(1).split(";", 1)[0]:
            continue  # a worker thread (the I/O pool): not the event loop
        n = int(m.group(2))
        frames = [function_of(f) for f in m.group(1).split(";") if f]
        total += n
        joined = " ".join(frames)
        group = next((g for g, names in table if any(name in joined for name in names)), None)
        if group is None:
            group = LOOP if frames and frames[-1].endswith("Runner.run") else "other"
        out[group] += n
    return total, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--us", type=float, default=None, help="steady µs per chunk of this process, same run")
    args = parser.parse_args()
    table = PROXY if args.file.name.endswith(".proxy.folded") else RUNTIME
    total, out = groups(args.file, table)
    print(f"{args.file.name}: {total} event-loop samples")
    for group, n in out.most_common():
        share = n / max(total, 1)
        us = f"{share * args.us:6.1f} µs" if args.us is not None else ""
        print(f"{100 * share:5.1f}% {us}  {group}")


if __name__ == "__main__":
    main()
