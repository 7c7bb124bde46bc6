"""The sandbox module on its own (no stack): layer choice, the cleared environment, Stop, the output
capture and the quota check; and bash with no working layer (in-process runtime, real Redis)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from services.runtime.sandbox import Layer, Sandbox, SandboxLimits, describe, probe_layer, select_sandbox
from services.runtime.sandbox.quota import enforce
from services.runtime.sandbox.runner import Capture
from services.runtime.skillset.paths import sandbox_skills_dir
from shared.storage.quota import WorkspaceQuota
from shared.storage.walk import walk
from tests.integration.runtime_inproc import inproc_worker
from tests.integration.runtime_support import call, done, script
from tests.sandbox.conftest import LAYERS
from tests.support.inproc import settings_for
from tests.support.needs import needs
from tests.support.polling import eventually

SKILLS = sandbox_skills_dir()
WORKING = [layer for layer in LAYERS if probe_layer(layer, SandboxLimits(), SKILLS) is None]


def test_capture_keeps_head_and_tail_in_bounded_memory() -> None:
    cap = Capture(100)
    for _ in range(10_000):
        cap.add(b"0123456789")
    text, truncated = cap.text()
    assert truncated and text.startswith("0123456789" * 5) and text.endswith("0123456789" * 5)
    assert "99900 bytes cut" in text and len(cap.tail) <= 200
    small = Capture(100)
    small.add(b"hello")
    assert small.text() == ("hello", False)


def test_off_only_when_explicit_and_flagged(tmp_path: Path) -> None:
    off = select_sandbox(settings_for("redis://x", tmp_path, GAMMA_SANDBOX="off"), SKILLS)
    assert off.layer == "off" and "unconfined" in str(describe(off)["warning"])
    bad = select_sandbox(settings_for("redis://x", tmp_path, GAMMA_SANDBOX="chroot"), SKILLS)
    assert bad.layer is None and "chroot" in bad.reason and describe(bad)["layer"] == "none"
    auto = select_sandbox(settings_for("redis://x", tmp_path), SKILLS)
    assert auto.layer == (WORKING[0] if WORKING else None)


async def test_no_layer_means_an_error_never_an_unconfined_run(tmp_path: Path) -> None:
    box = Sandbox(None, SandboxLimits(), reason="nothing works here")
    res = await box.run(box.request(f"touch {tmp_path}/ran", tmp_path / "ws", SKILLS, 5))
    assert res.error == "nothing works here" and res.exit_code is None
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("layer", WORKING)
async def test_environment_is_cleared(layer: Layer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://secret-host:1/0")
    monkeypatch.setenv("GAMMA_SERVICE_TOKEN", "very-secret-token")
    box = Sandbox(layer, SandboxLimits())
    res = await box.run(box.request("env", tmp_path / "ws", SKILLS, 10))
    assert res.exit_code == 0 and "PATH=" in res.output and "GAMMA_SKILLS_DIR=" in res.output
    assert "secret" not in res.output
    names = {line.split("=", 1)[0] for line in res.output.splitlines() if "=" in line}
    assert names <= {"PATH", "HOME", "LANG", "TZ", "TERM", "GAMMA_SKILLS_DIR", "TMPDIR", "PWD", "SHLVL", "_"}, names


@pytest.mark.parametrize("layer", WORKING)
async def test_stop_kills_the_call_at_once(layer: Layer, tmp_path: Path) -> None:
    box = Sandbox(layer, SandboxLimits())
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, stop.set)
    # Minutes of sleep: a call that the stop did not kill would not end within the wait.
    res = await asyncio.wait_for(box.run(box.request("sleep 600 & sleep 900", tmp_path / "ws", SKILLS, 1200), stop), 60)
    assert res.aborted and not res.timed_out


def test_quota_removes_the_calls_new_entries_only(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "old.bin").write_bytes(b"o" * 100)
    roomy = WorkspaceQuota(max_bytes=1000, max_files=10)
    before = walk(ws, roomy.limits)
    (ws / "d" / "new1.bin").write_bytes(b"n" * 600)
    (ws / "new2.bin").write_bytes(b"n" * 10)
    (ws / "newdir" / "a" / "b").mkdir(parents=True)  # a new directory goes as one name, subtree and all
    assert enforce(ws, before, walk(ws, roomy.limits), roomy) is None
    tight = WorkspaceQuota(max_bytes=500, max_files=10)
    report = enforce(ws, before, walk(ws, tight.limits), tight)
    assert report is not None and sorted(report.removed) == ["d/new1.bin", "new2.bin", "newdir"]
    assert not report.still_over
    assert sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*")) == ["d", "old.bin"]
    (ws / "old.bin").write_bytes(b"o" * 900)
    still = enforce(ws, before, walk(ws, tight.limits), tight)
    assert still is not None and still.still_over and not still.removed and "still over quota" in still.message()


def test_quota_counts_directories_and_removes_what_nests_too_deep(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep").write_bytes(b"k")
    quota = WorkspaceQuota(max_bytes=10**6, max_files=10, max_entries=50, max_depth=8)
    before = walk(ws, quota.limits)
    for i in range(60):  # empty directories: no file, no byte, still entries
        (ws / "many" / str(i)).mkdir(parents=True)
    report = enforce(ws, before, walk(ws, quota.limits), quota)
    assert report is not None and report.removed == ["many"] and not report.still_over
    deep = ws.joinpath(*["d"] * 30)
    deep.mkdir(parents=True)
    report = enforce(ws, before, walk(ws, quota.limits), quota)
    assert report is not None and report.too_deep == ["d/d/d/d/d/d/d/d/d"] and not report.still_over
    assert "deeper than 8 levels" in report.message()
    assert walk(ws, quota.limits).complete and not walk(ws, quota.limits).deeper


async def test_bash_without_a_working_layer_tells_the_model(redis_url: str, data_dir: Path) -> None:
    sid = "nolayer1"
    async with inproc_worker(redis_url, data_dir, GAMMA_SANDBOX="nonsense") as inp:
        session = await inp.live(sid)
        from shared.contracts.streams.inbox import UserPrompt

        await inp.append(UserPrompt(session_id=sid, message=script(
            {"tool_calls": [call("bash", command="touch ran.txt")]}, done())))
        await eventually(lambda: inp.events(sid, "agent_end"), timeout=30, what="the run's end")
        result = next(m for m in session.agent.context.messages
                      if getattr(m, "role", "") == "toolResult" and getattr(m, "tool_name", "") == "bash")
    text = "".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error and "bash is disabled" in text and "nonsense" in text, text
    assert not (session.paths.workspace / "ran.txt").exists()
    assert os.environ.get("GAMMA_SANDBOX") != "nonsense"


@needs(None if "bwrap" in WORKING else "bwrap does not work here")
async def test_bwrap_without_proc_still_confines(tmp_path: Path) -> None:
    """The variant the probe falls back to where a container's masked /proc cannot be remounted."""
    assert probe_layer("bwrap", SandboxLimits(), SKILLS, proc=False) is None
    box = Sandbox("bwrap", SandboxLimits(), proc=False)
    res = await box.run(box.request("ls /proc 2>/dev/null | wc -l; echo ok > f; cat f; ls /", tmp_path / "ws", SKILLS, 10))
    lines = res.output.split()
    assert res.exit_code == 0 and lines[0] == "0" and "ok" in lines and "workspace" in lines, res.output
    assert describe(box) == {"layer": "bwrap", "proc": False}


@pytest.mark.parametrize(("mode", "layer"), [("off", "off"), ("seatbelt", "none")])
async def test_readyz_and_metric_flag_off_and_no_layer(mode: str, layer: str, redis_url: str, data_dir: Path) -> None:
    """The real runtime app: `off` (explicit) and an unusable setting are visible in /readyz and /metrics."""
    import httpx

    from services.runtime.app import create_app
    from tests.support.inproc import running

    settings = settings_for(redis_url, data_dir, GAMMA_SANDBOX=mode)
    async with running(create_app, settings) as app, \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rt") as client:
        ready = (await client.get("/readyz")).json()
        metrics = (await client.get("/metrics")).text
    sandbox = ready["details"]["sandbox"]
    assert sandbox["layer"] == layer
    if mode == "off":
        assert "unconfined" in sandbox["warning"]
    else:
        assert "seatbelt" in sandbox["error"]
    assert f'gamma_sandbox_layer{{layer="{layer}"}} 1.0' in metrics


KERNEL_SURFACE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
for name, nr, args in (("io_uring_setup", 425, (1, buf)), ("ptrace", 101 if os.uname().machine == "x86_64" else 117,
                       (0, 0, 0, 0)), ("unshare", 272 if os.uname().machine == "x86_64" else 97, (0x10000000,))):
    r = libc.syscall(nr, *args)
    print(name, r, ctypes.get_errno())
"""


@pytest.mark.parametrize("layer", WORKING)
async def test_the_seccomp_filter_closes_kernel_surface(layer: Layer, tmp_path: Path) -> None:
    box = Sandbox(layer, SandboxLimits())
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "k.py").write_text(KERNEL_SURFACE)
    res = await box.run(box.request("python3 k.py", ws, SKILLS, 10))
    assert res.exit_code == 0, res.output
    results = {line.split()[0]: line.split()[1:] for line in res.output.splitlines()}
    assert results == {"io_uring_setup": ["-1", "1"], "ptrace": ["-1", "1"], "unshare": ["-1", "1"]}, res.output
