"""The bounds an image must fit before it reaches a model (shared/media/images.py applies them; Settings
gives them from the environment)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageLimits:
    max_source_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 50_000_000  # decoded size refused before decoding (decompression bombs)
    # The decoded pixels' bytes (width x height x bands x bytes per sample: shared/media/image_checks.py),
    # refused from the header: the pixel count alone lets a 16-bit image cost twice as much.
    max_decoded_bytes: int = 128 * 1024 * 1024
    max_long: int = 2048
    max_short: int = 768
    max_stored_bytes: int = 4 * 1024 * 1024  # an original above this is re-encoded
