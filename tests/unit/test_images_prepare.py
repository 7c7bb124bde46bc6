"""shared/media/images.py: images told by their bytes, brought within the limits by Pillow, refused when
corrupt or too large, stored once by content hash."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from shared.media.image_limits import ImageLimits
from shared.media.images import ImageRefused, ImageSource, prepare, sniff, store_image


def encoded(im: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    im.save(out, fmt, **options)
    return out.getvalue()


def test_types_are_told_by_magic_bytes_not_by_name() -> None:
    rgb = Image.new("RGB", (20, 10), (9, 9, 9))
    assert [sniff(encoded(rgb, f)[:12]) for f in ("PNG", "JPEG", "GIF", "WEBP")] == [
        "image/png", "image/jpeg", "image/gif", "image/webp"]
    assert sniff(b"%PDF-1.7\n....") is None and sniff(b"<svg xmlns=") is None


def test_an_image_within_the_limits_keeps_its_bytes() -> None:
    data = encoded(Image.new("RGB", (300, 200), (1, 2, 3)), "PNG")
    assert prepare(data, ImageLimits()).data == data


def test_a_large_image_is_downscaled_keeping_its_aspect_ratio() -> None:
    out = prepare(encoded(Image.new("RGB", (4000, 1000), (5, 5, 5)), "JPEG"), ImageLimits())
    assert (out.width, out.height) == (2048, 512) and out.mime_type == "image/jpeg"
    with Image.open(io.BytesIO(out.data)) as im:
        assert im.size == (2048, 512)


def test_an_animated_gif_sends_its_first_frame() -> None:
    frames = [Image.new("RGB", (40, 30), colour) for colour in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    data = encoded(frames[0], "GIF", save_all=True, append_images=frames[1:])
    out = prepare(data, ImageLimits())
    with Image.open(io.BytesIO(out.data)) as im:
        assert getattr(im, "n_frames", 1) == 1 and im.convert("RGB").getpixel((5, 5))[0] > 200


def test_exif_orientation_is_applied() -> None:
    im = Image.new("RGB", (60, 20), (7, 7, 7))
    exif = im.getexif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    out = prepare(encoded(im, "JPEG", exif=exif), ImageLimits())
    assert (out.width, out.height) == (20, 60)


@pytest.mark.parametrize("data", [
    encoded(Image.new("RGB", (64, 64), (1, 2, 3)), "PNG")[:60] + b"\x00" * 40,  # truncated
    b"\xff\xd8\xff" + b"\x00" * 100,  # a JPEG header and nothing else
    b"not an image at all",
])
def test_a_corrupt_image_is_refused_not_raised(data: bytes) -> None:
    with pytest.raises(ImageRefused):
        prepare(data, ImageLimits())


def test_limits_are_checked_before_decoding() -> None:
    big = encoded(Image.new("L", (5000, 5000)), "PNG")  # compresses to a few KB: a decompression bomb's shape
    with pytest.raises(ImageRefused, match="pixels") as refused:
        prepare(big, ImageLimits(max_pixels=10_000_000))
    assert refused.value.status == 413
    with pytest.raises(ImageRefused, match="bytes"):
        prepare(big, ImageLimits(max_source_bytes=1024))


def test_stored_once_by_content_hash_and_read_back(tmp_path: Path) -> None:
    image = prepare(encoded(Image.new("RGB", (30, 30), (4, 4, 4)), "PNG"), ImageLimits())
    first, second = store_image(tmp_path, image, "a.png"), store_image(tmp_path, image, "b.png")
    assert first.sha256 == second.sha256 and len(list((tmp_path / ".images").iterdir())) == 1
    url = ImageSource(tmp_path).url(first)
    assert url is not None and url.startswith("data:image/png;base64,")
