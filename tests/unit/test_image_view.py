"""An image tool result (services/runtime/tools/image_view.py): the file is sniffed, read and stored in
the I/O pool, never on the event loop's thread, and decoded in a worker process (shared/pools/image_decoding.py);
a file past the source limit is an error result before a byte of it is read."""

from __future__ import annotations

import io
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from services.runtime.tools import image_view
from shared.media.image_limits import ImageLimits
from shared.pools import offload
from shared.settings.images import ImageSettings
from shared.storage.disk import SessionPaths


@dataclass
class Host:
    paths: SessionPaths
    image_limits: ImageLimits
    image_settings: ImageSettings

    async def tenant(self) -> str:
        return "u1"


def host(tmp_path: Path, limits: ImageLimits | None = None) -> Any:
    (tmp_path / "workspace").mkdir()
    limits = limits or ImageLimits()
    return Host(SessionPaths(tmp_path), limits, ImageSettings(image_max_source_bytes=limits.max_source_bytes))


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (30, 60, 90)).save(out, "PNG")
    return out.getvalue()


async def test_the_file_is_read_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = host(tmp_path)
    (tmp_path / "workspace" / "chart.png").write_bytes(png(40, 30))
    loop_thread = threading.current_thread()
    threads: dict[str, threading.Thread] = {}

    def spy(name: str) -> Any:
        real = getattr(image_view, name)

        def wrapped(*args: Any) -> Any:
            threads[name] = threading.current_thread()
            return real(*args)
        return wrapped

    for name in ("sniff_workspace_file", "read_workspace_image", "store_image"):
        monkeypatch.setattr(image_view, name, spy(name))
    decoded_in: list[int] = []
    real_run = offload.Pool.run

    async def run(pool: offload.Pool, function: str, *args: Any, timeout_s: float) -> Any:
        decoded_in.append(await real_run(pool, "tests.support.offload_probe:pid", timeout_s=timeout_s))
        return await real_run(pool, function, *args, timeout_s=timeout_s)

    monkeypatch.setattr(offload.Pool, "run", run)
    assert await image_view.is_image(h, "chart.png")
    outcome = await image_view.image_outcome(h, "chart.png")
    assert not outcome.is_error and outcome.images and outcome.images[0].width == 40
    assert set(threads) == {"sniff_workspace_file", "read_workspace_image", "store_image"}
    assert all(t is not loop_thread for t in threads.values())
    assert decoded_in and decoded_in[0] != os.getpid()  # decoded in a worker process, not this one


async def test_an_image_past_the_source_limit_is_an_error_result(tmp_path: Path) -> None:
    h = host(tmp_path, ImageLimits(max_source_bytes=1024 * 1024))
    with (tmp_path / "workspace" / "huge.png").open("wb") as fh:
        fh.write(png(8, 8))
        fh.truncate(50 * 1024 * 1024)
    assert await image_view.is_image(h, "huge.png")
    outcome = await image_view.image_outcome(h, "huge.png")
    assert outcome.is_error and not outcome.images
    assert "Cannot show the image huge.png" in str(outcome.content) and "the limit is 1048576 bytes" in str(outcome.content)
    assert not (tmp_path / ".images").exists()
