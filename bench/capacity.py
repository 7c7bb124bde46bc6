"""The capacity model's arithmetic (docs/capacity.md): `python bench/capacity.py [--stream FILE]`.

Reads the committed bench results, picks each per-unit cost by file and field (the chunk path's from
ONE_OFF_STREAM unless `--stream` names a bench-stream result), and prints every
derived figure with the sum that made it, for the sizing docs/capacity.md states: 10,000 live
sessions of which 1,000 stream, and 1,000,000 dormant ones. Nothing is measured here; a figure that
has no bench behind it is an assumption, named as one in ASSUMED. Writes nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

# The sizing asked for, and the workload assumptions the benches do not fix (docs/capacity.md "Inputs").
ASSUMED = {
    "live_sessions": 10_000,
    "streaming_sessions": 1_000,
    "dormant_sessions": 1_000_000,
    "tokens_per_s": 80.0,           # bench-stream's fast model (config.rate)
    "answer_tokens": 400,           # bench-stream's answer (config.tokens)
    "ttft_s": 0.4,                  # bench-stream's time to the first token (config.ttft_ms)
    "mean_live_period_s": 1_800.0,  # how long a session stays live per wake (assumption)
    "core_busy_target": 0.5,        # a core kept at most half busy: the tail stays within a tick
    "redis_shard_busy_target": 0.5,
    "redis_shard_memory_gb": 8.0,   # usable dataset memory per shard (assumption)
}

# The chunk path's figures of docs/capacity.md "Per chunk" (run 2, main + direct read): a one-off
# bench-stream pair (200 sessions, load 13-17), kept here because bench-stream's canonical result
# records no per-prompt disk figures. Same keys as a bench-stream result's.
ONE_OFF_STREAM: dict[str, Any] = {"loads": [{
    "runtime_cpu_ms_per_1k_chunks": 46.2, "proxy_cpu_ms_per_1k_chunks": 13.1, "redis_cpu_ms_per_1k_chunks": 7.2,
    "redis_cmds_per_chunk": 0.225, "proxy_rss_per_client_kb": 57.3, "steady": None,
    "runtime_disk_per_prompt": {"write_kb": 48.1, "fsyncs": 8.1, "data_dir_kb": 13.5},
}]}


def field(name: str, path: str) -> tuple[float, str]:
    """A value from bench/results/<name> (ONE_OFF_STREAM for "") by a path of keys joined by "/" (list
    indexes as numbers; some keys have dots), and its citation."""
    value: Any = json.loads((RESULTS / name).read_text()) if name else ONE_OFF_STREAM
    name = name or "ONE_OFF_STREAM"
    for part in path.split("/"):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return float(value), f"{name} `{path}`"


def show(label: str, value: float, how: str) -> float:
    print(f"{label:58} {value:>14,.3f}   {how}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", default="", help="a bench-stream result in bench/results (default ONE_OFF_STREAM)")
    args = parser.parse_args()
    a = ASSUMED
    s = args.stream
    print("-- per-unit costs (file `field`)")
    c_rt_phase, src_rt_phase = field(s, "loads/0/runtime_cpu_ms_per_1k_chunks")
    c_px_phase, src_px_phase = field(s, "loads/0/proxy_cpu_ms_per_1k_chunks")
    try:
        c_rt, src_rt = field(s, "loads/0/steady/cpu_us_per_chunk/runtime")
        c_px, src_px = field(s, "loads/0/steady/cpu_us_per_chunk/proxy")
    except (KeyError, TypeError):  # no steady window in that run: the phase's (an upper bound)
        (c_rt, src_rt), (c_px, src_px) = (c_rt_phase, src_rt_phase), (c_px_phase, src_px_phase)
    c_redis, src_redis = field(s, "loads/0/redis_cpu_ms_per_1k_chunks")
    cmds, src_cmds = field(s, "loads/0/redis_cmds_per_chunk")
    rss_client, src_rss = field(s, "loads/0/proxy_rss_per_client_kb")
    fsyncs, src_fsync = field(s, "loads/0/runtime_disk_per_prompt/fsyncs")
    disk_kb, src_disk = field(s, "loads/0/runtime_disk_per_prompt/write_kb")
    dir_kb, src_dir = field(s, "loads/0/runtime_disk_per_prompt/data_dir_kb")
    for label, v, src in (("runtime CPU us / chunk, used (steady if measured)", c_rt, src_rt),
                          ("proxy CPU us / chunk, used (steady if measured)", c_px, src_px),
                          ("runtime CPU us / chunk, phase (incl. turns)", c_rt_phase, src_rt_phase),
                          ("proxy CPU us / chunk, phase (incl. prompts)", c_px_phase, src_px_phase),
                          ("Redis CPU us / chunk, phase", c_redis, src_redis), ("Redis commands / chunk", cmds, src_cmds),
                          ("proxy KB / SSE client", rss_client, src_rss), ("runtime fsyncs / prompt", fsyncs, src_fsync),
                          ("runtime KB written to disk / prompt", disk_kb, src_disk),
                          ("session disk KB / session (2 turns)", dir_kb, src_dir)):
        show(label, v, src)
    rt_prompt_ms, src = field("runtime_workers.json", "runs/0/runtime_cpu_ms_per_prompt")
    show("runtime CPU ms / prompt (zero-latency model)", rt_prompt_ms, src)
    px_s, src_pxs = field("runtime_workers.json", "runs/0/cpu_s/proxy")
    redis_s, src_rs = field("runtime_workers.json", "runs/0/cpu_s/redis")
    prompts, src_p = field("runtime_workers.json", "runs/0/prompts")
    px_prompt_ms = show("proxy CPU ms / prompt", px_s * 1e3 / prompts, f"{src_pxs} / {src_p}")
    redis_prompt_ms = show("Redis CPU ms / prompt", redis_s * 1e3 / prompts, f"{src_rs} / {src_p}")
    idle_redis_ms, src_ir = field("cluster_inbox.json", "rows/1/idle/redis_cpu_ms_per_s")
    idle_reader_ms, src_ird = field("cluster_inbox.json", "rows/1/idle/reader_cpu_ms_per_s")
    idle_n, src_in = field("cluster_inbox.json", "rows/1/sessions")
    redis_idle_us = show("Redis CPU us/s per idle live session (cluster)", idle_redis_ms * 1e3 / idle_n, f"{src_ir} / {src_in}")
    rt_idle_us = show("runtime inbox-reader CPU us/s per idle live session", idle_reader_ms * 1e3 / idle_n, f"{src_ird} / {src_in}")
    live_b, src_lb = field("dormant_memory.json", "per_dormant_session/before_sweep/info.used_memory")
    dormant_b, src_db = field("dormant_memory.json", "per_dormant_session/info_marginal/info.used_memory")
    show("Redis bytes / live session (events stream kept)", live_b, src_lb)
    show("Redis bytes / dormant session", dormant_b, src_db)
    heap_mb, src_heap = field("runtime.json", "idle_memory/per_session_mb")
    show("runtime heap MB / live session", heap_mb, src_heap)

    print("\n-- load")
    chunks = show("chunks/s", a["streaming_sessions"] * a["tokens_per_s"], "streaming sessions x tokens/s (one token a chunk)")
    turn_s = a["ttft_s"] + a["answer_tokens"] / a["tokens_per_s"]
    prompts_s = show("prompts/s (streaming sessions back to back)", a["streaming_sessions"] / turn_s,
                     f"streaming / (ttft + tokens / rate) = / {turn_s:.2f} s")
    wakes_s = show("wakes/s", a["live_sessions"] / a["mean_live_period_s"], "live sessions / mean live period (assumed)")
    idle_live = a["live_sessions"] - a["streaming_sessions"]

    print("\n-- runtime workers (cores)")
    rt_stream = show("streaming: chunks x us/chunk", chunks * c_rt / 1e6, "cores")
    rt_prompts = show("prompts: prompts/s x ms/prompt", prompts_s * rt_prompt_ms / 1e3, "cores")
    rt_idle = show("idle live: sessions x reader us/s", a["live_sessions"] * rt_idle_us / 1e6, "cores")
    rt_total = show("total (without wakes)", rt_stream + rt_prompts + rt_idle, "cores")
    show("workers at the busy target", rt_total / a["core_busy_target"], f"/ {a['core_busy_target']}")
    show("runtime memory GB (heap per live session)", a["live_sessions"] * heap_mb / 1024, "live x MB")

    w = "runs/0/quiet_per_prompt/wake_only"  # a waking prompt minus a live one (bench/wake_load.py)
    wake_ms, src_wm = field("wake_load.json", f"{w}/runtime_cpu_ms")
    wake_cmds, src_wc = field("wake_load.json", f"{w}/redis_cmds")
    wake_fsyncs, src_wf = field("wake_load.json", f"{w}/fsyncs")
    show("wakes: wakes/s x runtime ms/wake", wakes_s * wake_ms / 1e3, f"cores ({src_wm})")
    show("wakes: Redis commands/s", wakes_s * wake_cmds, src_wc)
    show("wakes: fsyncs/s", wakes_s * wake_fsyncs, src_wf)

    print("\n-- proxies (cores)")
    px_stream = show("streaming: chunks x us/chunk", chunks * c_px / 1e6, "cores")
    px_prompts = show("prompts: prompts/s x ms/prompt", prompts_s * px_prompt_ms / 1e3, "cores")
    show("proxies at the busy target", (px_stream + px_prompts) / a["core_busy_target"], f"/ {a['core_busy_target']}")
    show("proxy memory GB, an SSE client per live session", a["live_sessions"] * rss_client / 2**20, "live x KB")

    print("\n-- Redis")
    r_stream = show("streaming: chunks x Redis us/chunk", chunks * c_redis / 1e6, "cores")
    r_prompts = show("prompts: prompts/s x Redis ms/prompt", prompts_s * redis_prompt_ms / 1e3, "cores")
    r_idle = show("idle live: sessions x us/s", idle_live * redis_idle_us / 1e6, "cores")
    r_total = show("total Redis CPU", r_stream + r_prompts + r_idle, "cores")
    show("shards by CPU", r_total / a["redis_shard_busy_target"], f"/ {a['redis_shard_busy_target']}")
    show("commands/s, streaming", chunks * cmds, "chunks x commands/chunk")
    mem_gb = show("memory GB: live x B + dormant x B",
                  (a["live_sessions"] * live_b + a["dormant_sessions"] * dormant_b) / 2**30, "")
    show("shards by memory", mem_gb / a["redis_shard_memory_gb"], f"/ {a['redis_shard_memory_gb']} GB")

    print("\n-- session disk")
    show("fsyncs/s", prompts_s * fsyncs, "prompts/s x fsyncs/prompt")
    show("MB/s written", prompts_s * disk_kb / 1024, "prompts/s x KB/prompt")
    show("dormant sessions' disk GB", a["dormant_sessions"] * dir_kb / 2**20, "dormant x KB (a 2-turn session)")


if __name__ == "__main__":
    main()
