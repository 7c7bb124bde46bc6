"""What an image will cost to decode, judged from its header before any pixel is decoded
(docs/architecture.md "Images", "Bounded work").

- `decoded_bytes`: width x height x bands x bytes per sample as the file declares them (a 16-bit PNG
  counts two bytes a sample), or as Pillow holds the pixels when that is more (Pillow keeps RGB in
  four bytes a pixel): the memory the decode itself takes, before any conversion.
- `png_problem`: a PNG's structure checked cheaply: IHDR first, every chunk's CRC, and its IDAT
  stream inflated (output discarded, at most the size the header implies plus one byte) to the end
  of the zlib stream, with the row data the header implies. A truncated or corrupt PNG fails here,
  in the time it takes zlib to inflate it, never after a full decode.
"""

from __future__ import annotations

import struct
import zlib

from PIL import Image

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_BANDS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # IHDR colour type -> samples per pixel
_INFLATE_STEP = 1 << 20


def _pillow_pixel_bytes(mode: str) -> int:
    if mode in ("1", "L", "P"):
        return 1
    if mode.startswith("I;16"):
        return 2
    return 4  # RGB, RGBA, LA, CMYK, I, F...: Pillow's pixel is four bytes


def _declared(data: bytes) -> tuple[int, int] | None:
    """(bands, bytes per sample) a PNG's IHDR declares."""
    if data.startswith(PNG_SIGNATURE) and len(data) >= 29 and data[12:16] == b"IHDR":
        depth, colour = data[24], data[25]
        return _PNG_BANDS.get(colour, 4), max(1, depth // 8)
    return None


def decoded_bytes(im: Image.Image, data: bytes) -> int:
    """The bytes the decoded pixels take (at `im.size`: after a JPEG draft, the reduced size)."""
    width, height = im.size
    per_pixel = _pillow_pixel_bytes(im.mode)
    declared = _declared(data)
    if declared is not None:
        per_pixel = max(per_pixel, declared[0] * declared[1])
    else:
        per_pixel = max(per_pixel, len(im.getbands()) * (2 if "16" in im.mode else 1))
    return width * height * per_pixel


def _row_bytes(width: int, bands: int, depth: int) -> int:
    return 1 + (width * bands * depth + 7) // 8  # the filter byte, then the packed samples


def png_problem(data: bytes) -> str | None:
    """Why the PNG is malformed, or None."""
    if len(data) < 33 or data[12:16] != b"IHDR" or struct.unpack(">I", data[8:12])[0] != 13:
        return "the first chunk is not a 13-byte IHDR"
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    expected = None if interlace else height * _row_bytes(width, _PNG_BANDS.get(colour, 4), depth)
    inflater = zlib.decompressobj()
    produced, at, seen_idat = 0, 8, False
    while at + 12 <= len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        end = at + 8 + length
        if end + 4 > len(data):
            return f"chunk {kind!r} runs past the end of the file"
        body = data[at + 8:end]
        if zlib.crc32(data[at + 4:end]) != struct.unpack(">I", data[end:end + 4])[0]:
            return f"chunk {kind!r} fails its CRC"
        if kind == b"IDAT":
            seen_idat = True
            produced = _inflate(inflater, body, produced, expected)
            if produced < 0:
                return "the image data inflates past the size its header declares"
        if kind == b"IEND":
            break
        at = end + 4
    if not seen_idat:
        return "no image data (IDAT)"
    if not inflater.eof:
        return "the image data is truncated (its zlib stream does not end)"
    if expected is not None and produced != expected:
        return f"the image data holds {produced} bytes; its header declares {expected}"
    return None


def _inflate(inflater: zlib._Decompress, body: bytes, produced: int, expected: int | None) -> int:
    """`produced` plus what `body` inflates to, output discarded; -1 past `expected`."""
    chunk = body
    while chunk and not inflater.eof:
        out = inflater.decompress(chunk, _INFLATE_STEP)
        produced += len(out)
        if expected is not None and produced > expected:
            return -1
        chunk = inflater.unconsumed_tail
    return produced
