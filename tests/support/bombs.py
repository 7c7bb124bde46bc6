"""Small files that decode huge, built without decoding them (tests and bench/stalls.py)."""

from __future__ import annotations

import base64
import struct
import zlib


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_of_zeros(width: int, height: int, colour: int = 2, depth: int = 8, rows: int | None = None,
                 truncate: bool = False) -> bytes:
    """A PNG of black rows, compressed row by row (never held whole): 7000x7000 at 16 bits is ~0.3 MB.
    `rows` fewer than `height` or `truncate` (half the zlib stream) make it corrupt."""
    bands = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    row = bytes(1 + (width * bands * depth + 7) // 8)
    packer = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_RLE)  # runs of zeros: ~1,000:1, fast
    idat = b"".join(packer.compress(row) for _ in range(height if rows is None else rows)) + packer.flush()
    if truncate:
        idat = idat[: len(idat) // 2]
    header = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


# A lossless 7000x7000 WebP of one colour: 1,934 bytes, 196 MB decoded (made once by Pillow).
WEBP_7000 = base64.b64decode(
    "UklGRoYHAABXRUJQVlA4THkHAAAvV9vVBgdQiirUo/9BExIk+H+7PSJSLwlIkv7/JyP6n0CB+PuPIiLjv//+899///nvv//8999/"
    "/vvvP//995///vvPf//995///vvPf//957///vPff//577///Pfff/777z///ffff/777z///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9999///3333///ffff//9"
    "999///3333///ffff//9999///3333///ffff//9999///3nv//+899///nvv//8999///333/87BwA="
)
