"""Service wiring: each service alone answers /healthz, /metrics and /readyz; readiness follows Redis,
the consumer groups and (proxy, notifications) the five heartbeats; SIGTERM stops each cleanly; every
log line is JSON with `service` bound."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import redis
from prometheus_client.parser import text_string_to_metric_families

from shared.redis import keys
from tests.support.polling import wait_sync
from tests.support.ports import free_port
from tests.support.redis_server import start_redis_server
from tests.support.stack import SERVICES, Stack

GROUPS: dict[str, list[tuple[str, str]]] = {
    "runtime": [(keys.WAKE, keys.RUNTIME_GROUP)],
    "digest": [(keys.ARTIFACT_CHANGES, "digest"), (keys.LIFECYCLE, "digest"), (keys.INJECTIONS_RECORDED, "digest"),
               (keys.DIGEST_FLUSH, "digest")],
    "compaction": [(keys.COMPACTION_REQUESTS, "compaction")],
    "notifications": [(keys.NOTIFICATIONS, "notifications"), (keys.LIFECYCLE, "notifications"),
                      (keys.INJECTIONS_RECORDED, "notifications")],
    "proxy": [],
}


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), dict(err.headers), err.read()
    except OSError:
        return 0, {}, b""


def readyz(stack: Stack, name: str) -> tuple[int, Any]:
    status, _, body = get(stack.url(name) + "/readyz")
    return status, json.loads(body) if body else None


def groups_of(client: redis.Redis, stream: str) -> set[str]:
    try:
        return {g["name"].decode() for g in client.xinfo_groups(stream)}
    except redis.ResponseError:
        return set()


def json_lines(stack: Stack, name: str) -> list[dict[str, Any]]:
    lines = [line for line in stack.log(name).splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise AssertionError(f"{name} wrote a line that is not JSON: {line!r}") from exc
    return parsed


def check_health_and_metrics(stack: Stack, name: str) -> None:
    status, _, body = get(stack.url(name) + "/healthz")
    assert status == 200 and json.loads(body) == {"status": "ok", "service": name}
    # The public services serve /metrics on their internal port only (shared/serving/internal_http.py).
    internal = f"{name}_metrics" if f"{name}_metrics" in stack.ports else name
    status, headers, body = get(stack.url(internal) + "/metrics")
    assert status == 200
    assert headers.get("content-type", "").startswith("text/plain"), headers
    families = list(text_string_to_metric_families(body.decode()))
    assert families, f"{name} /metrics exported no metric family"


def test_readiness_health_metrics_sigterm_and_logs(redis_url: str, data_dir: Path) -> None:
    client = redis.Redis.from_url(redis_url)
    stack = Stack(redis_url=redis_url, data_dir=data_dir)
    try:
        # The two gatekeepers first: up and healthy, but not ready while the others are missing.
        stack.start("proxy", "notifications")
        for name in ("proxy", "notifications"):
            check_health_and_metrics(stack, name)
            status, body = wait_sync(lambda n=name: _own_beat(readyz(stack, n), n), what=f"{name} /readyz")
            assert status == 503, body
            assert body["ready"] is False
            assert body["services"]["runtime"] is False and body["services"][name] is True

        for name in ("runtime", "digest", "compaction"):
            stack.start(name)
            wait_sync(lambda n=name: readyz(stack, n)[0] == 200, what=f"{name} /readyz 200")
            check_health_and_metrics(stack, name)
        for name, pairs in GROUPS.items():
            for stream, group in pairs:
                assert group in groups_of(client, stream), f"{name}: group {group} on {stream} missing"

        for name in ("proxy", "notifications"):
            status, body = wait_sync(lambda n=name: _ok(readyz(stack, n)), what=f"{name} ready with all five")
            disk = body.pop("disk", None)  # the proxy reports the session disk (README "Reliability")
            assert body == {"ready": True, "services": dict.fromkeys(SERVICES, True)}
            assert name != "proxy" or (disk is not None and disk["state"] == "ok" and disk["free_bytes"] > 0)
        assert all(client.exists(keys.health(s)) for s in SERVICES)

        # A service that stops takes its heartbeat with it: the gatekeepers stop being ready.
        stop_cleanly(stack, "compaction")
        assert not client.exists(keys.health("compaction"))
        status, body = wait_sync(lambda: _not_ok(readyz(stack, "proxy")), what="proxy not ready without compaction")
        assert body["services"]["compaction"] is False

        for name in ("runtime", "digest", "notifications", "proxy"):
            stop_cleanly(stack, name)
        assert not any(client.exists(keys.health(s)) for s in SERVICES)

        for name in SERVICES:
            lines = json_lines(stack, name)
            assert lines, f"{name} logged nothing"
            assert all(line.get("service") == name for line in lines), [ln for ln in lines if ln.get("service") != name]
            events = [line["event"] for line in lines]
            assert "service_ready" in events and "service_stopped" in events, events
            assert events.index("service_ready") < events.index("service_stopped")
    finally:
        stack.stop()
        client.close()


def stop_cleanly(stack: Stack, name: str) -> None:
    proc = stack.procs[name]
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=40)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{name} did not stop on SIGTERM") from exc
    # uvicorn re-raises the captured SIGTERM after its graceful shutdown, so -SIGTERM is a clean exit
    # too; the proof of a clean shutdown is the lifespan's last line.
    assert code in (0, -signal.SIGTERM), f"{name} exited with {code}: {stack.log(name)[-2000:]}"
    assert json_lines(stack, name)[-1]["event"] == "service_stopped", stack.log(name)[-2000:]


def test_service_waits_for_redis_and_stops_on_sigterm_while_waiting(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}"
    stack = Stack(redis_url=url + "/0", data_dir=tmp_path / "data")
    redis_proc = None
    try:
        stack.start("compaction", "digest", wait=False)
        wait_sync(lambda: "waiting_for_redis" in stack.log("compaction"), what="the waiting log line")
        assert stack.procs["compaction"].poll() is None, stack.log("compaction")
        assert readyz(stack, "compaction")[0] != 200

        # SIGTERM while waiting: the service gives up at once instead of hanging until Redis answers.
        stack.procs["digest"].send_signal(signal.SIGTERM)
        assert stack.procs["digest"].wait(timeout=20) != 0
        assert "stopped while waiting for Redis" in stack.log("digest")
        assert all(line["service"] == "digest" for line in json_lines(stack, "digest"))

        _, redis_proc = start_redis_server(port=port, data_dir=str(tmp_path))
        wait_sync(lambda: readyz(stack, "compaction")[0] == 200, timeout=30, what="ready once Redis answers")
        assert "compaction" in groups_of(redis.Redis.from_url(url + "/0"), keys.COMPACTION_REQUESTS)
        stop_cleanly(stack, "compaction")
    finally:
        stack.stop()
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)


def _own_beat(result: tuple[int, Any], name: str) -> tuple[int, Any] | None:
    """/readyz answered and already counts this service's own heartbeat."""
    status, body = result
    return result if status in (200, 503) and (body or {}).get("services", {}).get(name) else None


def _ok(result: tuple[int, Any]) -> tuple[int, Any] | None:
    return result if result[0] == 200 else None


def _not_ok(result: tuple[int, Any]) -> tuple[int, Any] | None:
    return result if result[0] == 503 else None




def test_a_lost_consumer_group_makes_the_service_unready(redis_url: str, data_dir: Path) -> None:
    """FastStream stops a subscriber whose group vanished (FLUSHDB, Redis restarted without AOF) and
    never recreates it: the service must say so instead of staying ready while deaf."""
    client = redis.Redis.from_url(redis_url)
    stack = Stack(redis_url=redis_url, data_dir=data_dir)
    try:
        stack.start("compaction")
        wait_sync(lambda: readyz(stack, "compaction")[0] == 200, what="compaction ready")
        client.xgroup_destroy(keys.COMPACTION_REQUESTS, "compaction")  # on purpose, on this test's own db
        status, body = wait_sync(lambda: _not_ok(readyz(stack, "compaction")), what="not ready without its group")
        assert body["groups"] == [f"{keys.COMPACTION_REQUESTS} (compaction)"]
        assert "restart" in body["error"]
        wait_sync(lambda: not client.exists(keys.health("compaction")), timeout=15, what="the heartbeat to lapse")
        wait_sync(lambda: "consumer_groups_missing" in stack.log("compaction"), what="the error log line")
        stop_cleanly(stack, "compaction")
    finally:
        stack.stop()
        client.close()
