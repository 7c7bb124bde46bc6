"""Image decoding bounded (shared/pools/image_decoding.py, shared/media/image_checks.py): what the header says
decides before any pixel is decoded (a 16-bit 7000x7000 PNG of 0.3 MB, a 1.9 KB WebP of 49 M pixels),
a truncated PNG fails on its structure, a refusal is remembered by digest, and so is a prepared image
(the same bytes asked for at once decoded once), one user's decodes in flight are bounded, and a
decode past its time is stopped."""

from __future__ import annotations

import asyncio
import io
import struct
import zlib

import pytest
from PIL import Image

from shared.media.image_checks import png_problem
from shared.media.image_limits import ImageLimits
from shared.media.images import ImageRefused, prepare
from shared.pools import image_decoding, offload
from tests.support.bombs import WEBP_7000, png_of_zeros

pytestmark = pytest.mark.timeout(120)


def test_a_16_bit_png_is_refused_by_its_decoded_bytes_before_decoding() -> None:
    data = png_of_zeros(7000, 7000, colour=2, depth=16)
    assert len(data) < 600_000 and ImageLimits().max_pixels >= 7000 * 7000  # under the pixel limit
    with pytest.raises(ImageRefused) as refused:
        prepare(data, ImageLimits())
    assert refused.value.status == 413 and "294000000 bytes decoded" in str(refused.value)


def test_a_webp_bomb_is_refused_by_its_decoded_bytes() -> None:
    with pytest.raises(ImageRefused) as refused:
        prepare(WEBP_7000, ImageLimits())
    assert refused.value.status == 413 and "7000x7000" in str(refused.value)


@pytest.mark.parametrize("damage", ["truncated", "crc", "short rows"])
def test_a_corrupt_png_fails_on_its_structure(damage: str) -> None:
    data = png_of_zeros(4000, 4000, colour=0, depth=8, truncate=damage == "truncated",
                        rows=3000 if damage == "short rows" else None)
    if damage == "crc":
        at = data.index(b"IDAT") + 10
        data = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
    with pytest.raises(ImageRefused) as refused:
        prepare(data, ImageLimits())
    assert refused.value.status == 422 and "corrupt" in str(refused.value)


def test_a_large_jpeg_is_decoded_reduced() -> None:
    out = io.BytesIO()
    Image.linear_gradient("L").resize((4096, 3072)).convert("RGB").save(out, "JPEG", quality=60)
    with Image.open(io.BytesIO(out.getvalue())) as im:
        im.draft("RGB", (1024, 768))
        assert im.size == (1024, 768)  # libjpeg's 1/4 scale: a quarter of the sides decoded
    prepared = prepare(out.getvalue(), ImageLimits(max_decoded_bytes=8 * 1024 * 1024))  # 48 MB at full size
    assert (prepared.width, prepared.height) == (1024, 768)


async def test_a_refused_image_is_remembered_and_not_decoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = image_decoding.Decoder(ImageLimits(), workers=1)
    data = png_of_zeros(2000, 2000, colour=0, depth=8, truncate=True)
    runs: list[str] = []
    real_run = offload.Pool.run

    async def run(pool: offload.Pool, function: str, *args: object, timeout_s: float) -> object:
        runs.append(function)
        return await real_run(pool, function, *args, timeout_s=timeout_s)

    monkeypatch.setattr(offload.Pool, "run", run)
    for _ in range(3):
        with pytest.raises(ImageRefused) as refused:
            await decoder.prepare(data, "u1")
        assert refused.value.status == 422 and "truncated" in str(refused.value)
    assert runs == ["shared.media.images:prepare"]  # decoded once; the repeats cost a hash


def counted_runs(monkeypatch: pytest.MonkeyPatch, gate: asyncio.Event | None = None,
                 started: asyncio.Event | None = None) -> list[bytes]:
    """Pool.run replaced by `prepare` in this process, each job's bytes recorded (`started` set); held
    until `gate` is set."""
    runs: list[bytes] = []

    async def run(pool: offload.Pool, function: str, data: bytes, limits: ImageLimits, timeout_s: float) -> object:
        runs.append(data)
        if started is not None:
            started.set()
        if gate is not None:
            await gate.wait()
        return prepare(data, limits)

    monkeypatch.setattr(offload.Pool, "run", run)
    return runs


async def test_the_same_bytes_read_at_once_and_again_are_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    runs = counted_runs(monkeypatch, gate, started)
    decoder = image_decoding.Decoder(ImageLimits(), workers=2, per_user=2)
    data = png_of_zeros(3000, 100, colour=2, depth=8)  # downscaled: re-encoded, not its own bytes
    five = [asyncio.ensure_future(decoder.prepare(data, "u1")) for _ in range(5)]
    await started.wait()
    gate.set()
    prepared = await asyncio.gather(*five)
    again = await decoder.prepare(data, "u2")
    assert runs == [data]  # before: five decodes (two at a time, the rest waiting for the user's slots)
    assert all(p == prepare(data, ImageLimits()) for p in [*prepared, again]) and again.width == 2048


async def test_a_cancelled_reader_leaves_the_shared_decode_to_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    runs = counted_runs(monkeypatch, gate, started)
    decoder = image_decoding.Decoder(ImageLimits())
    data = png_of_zeros(64, 64, colour=0, depth=8)
    first = asyncio.ensure_future(decoder.prepare(data, "u1"))
    await started.wait()
    second = asyncio.ensure_future(decoder.prepare(data, "u1"))
    await asyncio.sleep(0)
    first.cancel()
    gate.set()
    assert (await second).data == data and first.cancelled() and len(runs) == 1


async def test_prepared_images_kept_are_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = counted_runs(monkeypatch)
    images = [png_of_zeros(64, 64 + i, colour=0, depth=8) for i in range(3)]
    monkeypatch.setattr(image_decoding, "KEPT_BYTES", len(images[0]) + len(images[1]) + 8)
    decoder = image_decoding.Decoder(ImageLimits())
    for data in [*images, images[2], images[0]]:
        await decoder.prepare(data, "u1")
    assert runs == [*images, images[0]]  # the oldest went when the third came; the newest stayed


async def test_a_decode_past_its_time_is_stopped_and_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = image_decoding.Decoder(ImageLimits(), workers=1, timeout_s=0.5)
    real_run = offload.Pool.run

    async def run(pool: offload.Pool, function: str, *args: object, timeout_s: float) -> object:
        return await real_run(pool, "tests.support.offload_probe:spin", 60.0, timeout_s=timeout_s)

    monkeypatch.setattr(offload.Pool, "run", run)
    data = png_of_zeros(10, 10, colour=0, depth=8)
    for _ in range(2):
        with pytest.raises(ImageRefused) as refused:
            await decoder.prepare(data, "u1")
        assert refused.value.status == 422 and "took over 0.5 s" in str(refused.value)


async def test_one_users_decodes_in_flight_are_bounded() -> None:
    decoder = image_decoding.Decoder(ImageLimits(), workers=2, per_user=1, user_wait_s=0.2)
    gate = asyncio.Event()
    async with decoder._user_slot("u1"):
        with pytest.raises(ImageRefused) as refused:
            async with decoder._user_slot("u1"):
                gate.set()
        assert refused.value.status == 429
        async with decoder._user_slot("u2"):  # another user is not held up
            pass
    assert not gate.is_set() and decoder._users is not None and len(decoder._users) == 0  # nothing kept per user


def test_png_of_zeros_is_well_formed() -> None:
    data = png_of_zeros(64, 32, colour=2, depth=8)
    assert struct.unpack(">II", data[16:24]) == (64, 32) and zlib.crc32(data[12:29]) == struct.unpack(">I", data[29:33])[0]
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        assert im.size == (64, 32)


@pytest.mark.parametrize("mode", ["1", "L", "P", "LA", "RGB", "RGBA", "I;16"])
def test_well_formed_pngs_of_every_mode_pass_the_structure_check(mode: str) -> None:
    im = Image.new("I;16", (40, 40), 1000) if mode == "I;16" else Image.effect_noise((300, 200), 50).convert(mode)
    out = io.BytesIO()
    im.save(out, "PNG")
    assert png_problem(out.getvalue()) is None
