"""Settings of each service process: ports, request heads, threads, heap policy, traces."""

from __future__ import annotations

from pydantic import Field

from shared.settings.area import Area


class ServerSettings(Area):
    """Each service process: where it listens, the request heads it takes, its threads, heap and traces."""

    host: str = Field("127.0.0.1", validation_alias="GAMMA_HOST",
        description="Bind address (`0.0.0.0` in containers).")
    proxy_port: int = Field(8000, validation_alias="GAMMA_PROXY_PORT",
        description="The proxy's public port.")
    notifications_port: int = Field(8001, validation_alias="GAMMA_NOTIFICATIONS_PORT",
        description="The notifications service's public port (notification producers).")
    runtime_port: int = Field(8002, validation_alias="GAMMA_RUNTIME_PORT",
        description="The runtime's health/metrics port (a further worker of `make run` on + 10, + 20, ...).")
    digest_port: int = Field(8003, validation_alias="GAMMA_DIGEST_PORT",
        description="The digest service's health/metrics port.")
    compaction_port: int = Field(8004, validation_alias="GAMMA_COMPACTION_PORT",
        description="The compaction service's health/metrics port.")
    connectors_port: int = Field(8005, validation_alias="GAMMA_CONNECTOR_PORT",
        description="The example connector's health port (`services/connectors/example`).")
    proxy_metrics_port: int = Field(8100, validation_alias="GAMMA_PROXY_METRICS_PORT",
        description="The proxy's internal port: `/metrics`, `/docs` (not on the public port).")
    notifications_metrics_port: int = Field(8101, validation_alias="GAMMA_NOTIFICATIONS_METRICS_PORT",
        description="The notifications service's internal port: `/metrics`, `/docs` (not on the public port).")
    # One worker's event loop is the bottleneck of a saturated stack (bench-e2e, docs/architecture.md "Streaming at scale").
    runtime_workers: int = Field(0, ge=0, le=64, validation_alias="GAMMA_RUNTIME_WORKERS",
        description="Runtime worker processes `make run` starts; the second listens on `GAMMA_RUNTIME_PORT` + 10, the"
                    " third + 20, ... (compose: `deploy.replicas` of `runtime`, 2).")
    max_header_bytes: int = Field(64 * 1024, ge=4096, validation_alias="GAMMA_MAX_HEADER_BYTES",
        description="Request line plus header fields, in bytes, on every service port (431, connection closed).")
    max_headers: int = Field(100, ge=10, validation_alias="GAMMA_MAX_HEADERS",
        description="Header fields per request on every service port (431, connection closed).")
    trace_client_context: bool = Field(
        False, validation_alias="GAMMA_TRACE_CLIENT_CONTEXT",
        description="With tracing on: continue the trace a client's `traceparent` names at the public services "
        "(a gateway that starts traces). Off, their trace headers are dropped and each request starts a trace "
        "sampled by our own sampler: a client cannot force sampling or choose trace ids.")
    trace_inbox: bool = Field(False, validation_alias="GAMMA_TRACE_INBOX",
        description="Log where an inbox entry's, a file write's and a live PUT's time goes (`bench/e2e.py --trace`).")
    gc_freeze_s: float = Field(5.0, ge=0, validation_alias="GAMMA_GC_FREEZE_S",
        description="Every this many seconds the service looks whether a full collection is due: it runs gen 2's "
                    "collections itself, never over startup's frozen heap (`shared/serving/gcpolicy.py`); 0: off "
                    "(CPython's own rule).")
    gc_full_s: float = Field(600.0, gt=0, validation_alias="GAMMA_GC_FULL_S",
        description="Every this many seconds the heap but startup's is collected once (`shared/serving/gcpolicy.py`).")
    gc_full_growth: float = Field(0.25, gt=0, validation_alias="GAMMA_GC_FULL_GROWTH",
        description="A full collection also runs once the heap has grown by this fraction since the last one "
                    "(closed sessions' cycles; `shared/serving/gcpolicy.py`).")
    gc_full_defer_s: float = Field(30.0, ge=0, validation_alias="GAMMA_GC_FULL_DEFER_S",
        description="A full collection that falls due while the process is busy with latency-sensitive work (the "
                    "runtime: model streams being read) waits for its end at most this long (`shared/serving/gcpolicy.py`); "
                    "0: never waits.")
    gc_gen0: int = Field(700, ge=100, validation_alias="GAMMA_GC_GEN0",
        description="Allocations between two young (generation 0) collections of the cyclic GC (CPython's 700). "
                    "20,000 saved the runtime ~4% of its CPU while streaming (perf), within the noise of whole runs, "
                    "and kept the proxy's large responses' cyclic garbage (20 MB previews) for longer "
                    "(`shared/serving/gcpolicy.py`).")
    gc_full_released: int = Field(32, ge=0, validation_alias="GAMMA_GC_FULL_RELEASED",
        description="A full collection also runs once this many sessions were closed since the last one (their "
                    "state is cyclic garbage; `shared/serving/gcpolicy.py`); 0: off.")
    gc_malloc_trim: bool = Field(False, validation_alias="GAMMA_GC_MALLOC_TRIM",
        description="After each full collection, hand malloc's free pages back to the OS (glibc `malloc_trim`; "
                    "`shared/serving/gcpolicy.py`).")
    heap_census: str = Field("", validation_alias="GAMMA_HEAP_CENSUS",
        description="A JSONL file (`{pid}` replaced) the service appends an object census of its heap to "
                    "(`shared/serving/heapcensus.py`; it stops the loop for the walk: diagnostics only); empty: off.")
    heap_census_s: float = Field(60.0, gt=0, validation_alias="GAMMA_HEAP_CENSUS_S",
        description="Seconds between two lines of the heap census (`GAMMA_HEAP_CENSUS`).")
    # Threads of each service's default executor (asyncio.to_thread): blocking disk I/O, mostly fsync
    # waits, so far more than the cores (shared/pools/iopool.py; Python's default is 6 on 2 cores).
    io_threads: int = Field(64, ge=1, le=1024, validation_alias="GAMMA_IO_THREADS",
        description="Threads of each service's default executor (`asyncio.to_thread`: fsyncs, blob and page reads; "
                    "Python's own default is cpus + 4), `shared/pools/iopool.py`.")
