"""The disk-fault tests' rig: the five services on a small tmpfs session disk, and the checks every
disk fault ends with (README "Reliability").

The checks: no temp file of an atomic write left anywhere in a session; every transcript parses line
by line and forms one chain (tests/reliability/workload.py's audit); each acknowledged prompt is
recorded once and answered; each acknowledged file write's bytes are on disk.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.reliability.workload import Audit, read_transcript_file
from tests.support.polling import wait_sync
from tests.support.sessions import entries, tool_results
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}
# The probe runs often, so a test sees a state change within a fraction of a second.
DISK_ENV = {"GAMMA_DISK_PROBE_S": "0.2", "GAMMA_DISK_PROBE_TIMEOUT_S": "3", "GAMMA_DISK_MIN_FREE_BYTES": "65536",
            "GAMMA_REPLY_TIMEOUT_S": "20"}
TEMP_NAME = re.compile(r"(^\.gamma-[0-9a-f]{16}\.tmp$)|(\.tmp$)")


@dataclass
class Acknowledged:
    """What the services acknowledged during a test: checked at its end."""

    prompts: dict[str, str] = field(default_factory=dict)  # prompt_id -> session
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (session, path) -> bytes


def client(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url(), headers=ALICE, timeout=httpx.Timeout(30, read=60))


def readyz(stack: Stack, name: str = "proxy") -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(stack.url(name) + "/readyz", timeout=10).json()
    return body


def disk_state(stack: Stack, name: str = "proxy") -> str:
    return str((readyz(stack, name).get("disk") or {}).get("state"))


def wait_disk(stack: Stack, state: str, *names: str, timeout: float = 20,
              refill: Callable[[], object] | None = None) -> None:
    """`refill` before each look: the services free an inode now and then (a cleanup, a rename over an
    older file), and a probe that finds one free reports the disk ok again (shared/serving/diskhealth.py)."""
    def seen(name: str) -> bool:
        if refill is not None:
            refill()
        return disk_state(stack, name) == state

    for name in names or ("proxy", "runtime", "digest"):
        wait_sync(lambda n=name: seen(n), timeout=timeout, what=f"{name} to report the disk {state}")  # type: ignore[misc]


def temp_files(root: Path) -> list[str]:
    found = []
    for top, _, files in os.walk(root):
        found += [os.path.join(top, f) for f in files if TEMP_NAME.search(f)]
    return found


def lasting_temp_files(root: Path, settle_s: float = 10.0) -> list[str]:
    """Temp files still there `settle_s` later: a write in flight when the audit looks (the digest
    writing a revision after the last acknowledged save) renames its temp within moments, and one a
    full disk refused to unlink is swept once the disk is back (shared/storage/leftovers.py)."""
    first = temp_files(root)
    if not first:
        return []
    with contextlib.suppress(AssertionError):
        wait_sync(lambda: not set(first) & set(temp_files(root)), timeout=settle_s, interval=0.2)
    return sorted(set(first) & set(temp_files(root)))


def session_dir(stack: Stack, sid: str) -> Path:
    return stack.data_dir / "sessions" / sid


def answered(api: httpx.Client, sid: str, prompt_id: str) -> bool:
    items = entries(api, sid)
    at = next((i for i, e in enumerate(items) if e.get("promptId") == prompt_id), None)
    if at is None:
        return False
    done = any((r.get("details") or {}).get("blockOnUser") for r in tool_results(items[at:], "message_user"))
    return done and not api.get(f"/sessions/{sid}").json().get("running")


def post_prompt(api: httpx.Client, acked: Acknowledged, sid: str, text: str) -> str:
    resp = api.post(f"/sessions/{sid}/messages", json={"message": text})
    assert resp.status_code == 202, resp.text
    prompt_id = str(resp.json()["prompt_id"])
    acked.prompts[prompt_id] = sid
    return prompt_id


def put_file(api: httpx.Client, acked: Acknowledged, sid: str, path: str, data: bytes) -> httpx.Response:
    resp = api.put(f"/sessions/{sid}/workspace/files/{path}", content=data)
    if resp.status_code == 200:
        acked.files[(sid, path)] = data
    return resp


def assert_refused(resp: httpx.Response, status: int, cause: str) -> None:
    """A clear answer naming the cause: never a bare 500."""
    assert resp.status_code == status, (resp.status_code, resp.text)
    body = resp.json()
    assert body["detail"]["cause"] == cause, body
    assert "disk" in body["error"], body


def audit(stack: Stack, api: httpx.Client, acked: Acknowledged, timeout: float = 90) -> Audit:
    """Everything acknowledged is there, once; nothing torn; no temp file left."""
    for prompt_id, sid in acked.prompts.items():
        wait_sync(lambda p=prompt_id, s=sid: answered(api, s, p), timeout=timeout,  # type: ignore[misc]
                  interval=0.3, what=f"prompt {prompt_id} answered")
    result = Audit()
    for sid in {*acked.prompts.values(), *(s for s, _ in acked.files)}:
        lines = read_transcript_file(session_dir(stack, sid) / "transcript.jsonl", result)
        recorded = [e.get("promptId") for e in lines if e.get("promptId")]
        for prompt_id in (p for p, s in acked.prompts.items() if s == sid):
            n = recorded.count(prompt_id)
            if n != 1:
                result.duplicates.append(f"{sid}: prompt {prompt_id} recorded {n} times")
    for (sid, path), data in acked.files.items():
        result.files_checked += 1
        got = api.get(f"/sessions/{sid}/workspace/files/{path}")
        if got.status_code != 200 or got.content != data:
            result.losses.append(f"{sid}: acknowledged file {path} is {got.status_code}, {len(got.content)} bytes")
    result.corrupt += [f"temp file left: {p}" for p in lasting_temp_files(stack.data_dir / "sessions")]
    assert result.ok, result.summary() | {"losses": result.losses, "duplicates": result.duplicates,
                                          "corrupt": result.corrupt}
    return result


def metric(stack: Stack, name: str, service: str = "runtime") -> float | None:
    text = httpx.get(stack.url(service) + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def started_stack(redis_url: str, mountpoint: Path, logs: Path, **env: str) -> Iterator[Stack]:
    """The five services with their session disk on `mountpoint` (logs elsewhere: a full disk must
    not take the evidence with it). Stopped at the end whatever happened."""
    stack = Stack(redis_url=redis_url, data_dir=mountpoint / "data", log_dir=logs, env_overrides=DISK_ENV | env)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
