"""Pick the layer at runtime start-up: `auto` takes the strongest one that really runs a command here
(bwrap, then landlock); an explicit layer is used only if it works; `off` only when set explicitly.
With no working layer the Sandbox has `layer=None`: bash then returns an error, never runs unconfined."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import cast

import structlog
from prometheus_client import CollectorRegistry, Gauge

from services.runtime.sandbox import cgroup, landlock
from services.runtime.sandbox.bwrap import bwrap_binary
from services.runtime.sandbox.core import Sandbox
from services.runtime.sandbox.types import Layer, SandboxLimits
from shared.settings import Settings

log = structlog.get_logger()
ORDER: tuple[Layer, ...] = ("bwrap", "landlock")
MODES = ("auto", "bwrap", "landlock", "off")
PROBE = "printf probe > .probe && cat .probe && rm .probe"
_chosen: dict[tuple[str, SandboxLimits], Sandbox] = {}


def limits_from(settings: Settings) -> SandboxLimits:
    return SandboxLimits(memory_bytes=settings.commands.sandbox_memory_bytes, cpu_s=settings.commands.sandbox_cpu_s,
                         max_procs=settings.commands.sandbox_max_procs, max_open_files=settings.commands.sandbox_max_open_files,
                         file_bytes=settings.storage.workspace_max_bytes,
                         workspace_files=settings.storage.workspace_max_files, tmp_bytes=settings.commands.sandbox_tmp_bytes,
                         workspace_entries=settings.storage.workspace_max_entries,
                         workspace_depth=settings.storage.workspace_max_depth, walk_budget_s=settings.storage.workspace_walk_budget_s,
                         cgroup=settings.commands.sandbox_cgroup)


def _missing(layer: Layer) -> str | None:
    if layer == "bwrap":
        return None if bwrap_binary() else "bwrap is not installed (Debian package bubblewrap)"
    return landlock.available()


def probe_layer(layer: Layer, limits: SandboxLimits, skills_dir: Path, proc: bool = True,
                group: cgroup.Base | None = None) -> str | None:
    """Run a real command through the layer (inside a call cgroup made in `group`); None if it worked, else why not."""
    missing = _missing(layer)
    if missing:
        return missing
    work = Path(tempfile.mkdtemp(prefix="gamma-sandbox-probe-"))
    try:
        box = Sandbox(layer, limits, proc=proc, cgroup=group)
        req = box.request(PROBE, work / "workspace", skills_dir, timeout=15)
        res = _run_sync(box, req)
        if res.exit_code == 0 and res.output.strip() == "probe":
            return None
        return f"probe exited {res.exit_code}: {res.output.strip()[-300:]}"
    except OSError as exc:
        return f"probe failed: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_sync(box: Sandbox, req):  # type: ignore[no-untyped-def]
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(box.run(req))
    # Called from inside an event loop (an in-process worker): probe on a thread of its own.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, box.run(req)).result()


def select_sandbox(settings: Settings, skills_dir: Path) -> Sandbox:
    """The process's sandbox for these settings (probed once, then cached)."""
    mode = (settings.commands.sandbox or "auto").strip().lower()
    limits = limits_from(settings)
    cached = _chosen.get((mode, limits))
    if cached is not None:
        return cached
    box = _select(mode, limits, skills_dir)
    _chosen[(mode, limits)] = box
    return box


def _select(mode: str, limits: SandboxLimits, skills_dir: Path) -> Sandbox:
    if mode == "off":
        log.warning("sandbox_off", hint="GAMMA_SANDBOX=off: agent commands run UNCONFINED (only env cleared and "
                    "rlimits); never use this with untrusted content or more than one user")
        return Sandbox("off", limits, reason="GAMMA_SANDBOX=off")
    if mode not in MODES:
        reason = f"GAMMA_SANDBOX={mode!r} is not one of {', '.join(MODES)}"
        log.error("sandbox_unavailable", reason=reason)
        return Sandbox(None, limits, reason=reason)
    tried: list[str] = []
    for name in ORDER if mode == "auto" else (mode,):
        layer = cast(Layer, name)
        why = probe_layer(layer, limits, skills_dir)
        if why is None:
            log.info("sandbox_layer", layer=layer, mode=mode, tried=tried)
            return _with_cgroup(Sandbox(layer, limits), skills_dir)
        tried.append(f"{layer}: {why}")
        if layer == "bwrap" and probe_layer(layer, limits, skills_dir, proc=False) is None:
            log.warning("sandbox_layer", layer=layer, mode=mode, proc=False, tried=tried,
                        hint="no fresh /proc allowed here (masked /proc): commands run without /proc")
            return _with_cgroup(Sandbox(layer, limits, proc=False), skills_dir)
    reason = ("no sandbox layer works on this host, so bash is disabled (" + "; ".join(tried) + "). Install "
              "bubblewrap and allow user namespaces, or run on a kernel with Landlock; see README 'Security'.")
    log.error("sandbox_unavailable", mode=mode, reason=reason)
    return Sandbox(None, limits, reason=reason)


def _with_cgroup(box: Sandbox, skills_dir: Path) -> Sandbox:
    """The layer with a memory cgroup per call where the host offers one that really works (cgroup.py)."""
    base = cgroup.find_base(box.limits.cgroup)
    if base is not None and box.layer is not None:
        why = probe_layer(box.layer, box.limits, skills_dir, box.proc, base)
        if why is None:
            log.info("sandbox_memory", cgroup=str(base.path), version=base.version)
            return replace(box, cgroup=base)
        log.warning("sandbox_memory", cgroup=None, tried=str(base.path), why=why)
    log.warning("sandbox_memory", cgroup=None, setting=box.limits.cgroup,
                hint="no memory cgroup per call: a call's memory is bounded by RLIMIT_AS per process and its "
                     "tmpfs sizes only (README 'Security')")
    return box


def describe(box: Sandbox) -> dict[str, object]:
    """What /readyz shows under details.sandbox."""
    out: dict[str, object] = {"layer": box.layer or "none"}
    if box.cgroup is not None:
        out["memoryCgroup"] = str(box.cgroup.path)
    if box.layer == "bwrap" and not box.proc:
        out["proc"] = False
    if box.layer == "off":
        out["warning"] = "GAMMA_SANDBOX=off: agent commands run unconfined"
    elif box.layer is None:
        out["error"] = box.reason
    return out


def export_metric(registry: CollectorRegistry, box: Sandbox) -> None:
    gauge = Gauge("gamma_sandbox_layer", "The layer confining agent commands (1 on the active one)", ["layer"],
                  registry=registry)
    for layer in (*ORDER, "off", "none"):
        gauge.labels(layer=layer).set(1 if (box.layer or "none") == layer else 0)
