"""An image tool result (services/runtime/tools/image_view.py): the file is sniffed, read, decoded and
stored in the I/O pool, never on the event loop's thread; a file past the source limit is an error
result before a byte of it is read."""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from services.runtime.tools import image_view
from shared.disk import SessionPaths
from shared.image_limits import ImageLimits


@dataclass
class Host:
    paths: SessionPaths
    image_limits: ImageLimits


def host(tmp_path: Path, limits: ImageLimits | None = None) -> Any:
    (tmp_path / "workspace").mkdir()
    return Host(SessionPaths(tmp_path), limits or ImageLimits())


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

    for name in ("sniff_workspace_file", "read_workspace_image", "prepare", "store_image"):
        monkeypatch.setattr(image_view, name, spy(name))
    assert await image_view.is_image(h, "chart.png")
    outcome = await image_view.image_outcome(h, "chart.png")
    assert not outcome.is_error and outcome.images and outcome.images[0].width == 40
    assert set(threads) == {"sniff_workspace_file", "read_workspace_image", "prepare", "store_image"}
    assert all(t is not loop_thread for t in threads.values())


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
