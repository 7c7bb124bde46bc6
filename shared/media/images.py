"""Images of the conversation: recognised by their bytes, brought within the model's limits with
Pillow, stored once per session by content hash, and read back for each request
(docs/architecture.md "Images").

- `prepare` decodes an image (PNG, JPEG, GIF, WebP, told apart by magic bytes, never by a name),
  refuses a corrupt one or one past the limits, takes the first frame of an animation, applies the
  EXIF orientation and downscales, keeping the aspect ratio, so the long side is at most `max_long`
  and the short side at most `max_short` (OpenAI's vision guide: a high-detail image is fitted in
  2048 x 2048, then its short side brought to 768). An image already within the limits keeps its
  exact bytes.
- `store_image` writes the bytes to `sessions/{sid}/.images/{sha256}`, atomically and only once: a
  content-addressed file is the same file whoever writes it (the proxy for attachments, the runtime
  for tool results), so the slice has no single owner to coordinate with.
- `ImageSource` turns a reference into the data URL a request carries; the same reference gives the
  same URL on every wake and after every compaction (the provider's prefix cache).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

from shared.contracts.records.messages import ImageMime, ImageRef
from shared.media.image_checks import decoded_bytes, png_problem
from shared.media.image_limits import ImageLimits
from shared.storage import workspace_fs
from shared.storage.disk import DiskError, TooLarge, atomic_write_bytes

IMAGES_DIR = ".images"
EXIF_ORIENTATION = 0x0112
_KEEP_MODES = frozenset({"RGB", "RGBA", "L", "LA", "P"})


class ImageRefused(Exception):
    """Not an image the model can take: unknown format, corrupt, or past a limit. A tool answers it
    as an error result, the proxy as a 4xx (`status`); neither crashes."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[type[ImageRefused], tuple[str, int]]:  # across shared/pools/offload.py's pipe
        return type(self), (str(self), self.status)


@dataclass(frozen=True)
class PreparedImage:
    data: bytes
    mime_type: ImageMime
    width: int
    height: int


def sniff(head: bytes) -> ImageMime | None:
    """The image type by magic bytes (the first 12 are enough), or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def target_size(width: int, height: int, limits: ImageLimits) -> tuple[int, int]:
    """The size within both side limits, aspect ratio kept; never enlarged."""
    scale = min(1.0, limits.max_long / max(width, height), limits.max_short / min(width, height))
    if scale >= 1.0:
        return width, height
    return max(1, round(width * scale)), max(1, round(height * scale))


def _within(im: Image.Image, data: bytes, mime: ImageMime, limits: ImageLimits) -> tuple[int, int]:
    """The image's size, once its header shows it fits the limits; a JPEG is set to decode reduced
    (`draft`: libjpeg's 1/2, 1/4, 1/8 scales) when it will be downscaled anyway."""
    width, height = im.size
    if width < 1 or height < 1 or width * height > limits.max_pixels:
        raise ImageRefused(f"image is {width}x{height} pixels; the limit is {limits.max_pixels} pixels", 413)
    if mime == "image/jpeg" and target_size(width, height, limits) != (width, height):
        im.draft(im.mode, target_size(width, height, limits))
    cost = decoded_bytes(im, data)
    if cost > limits.max_decoded_bytes:
        raise ImageRefused(f"image is {width}x{height} pixels ({im.mode}) and would take {cost} bytes decoded; the "
                           f"limit is {limits.max_decoded_bytes} bytes", 413)
    if mime == "image/png" and (problem := png_problem(data)) is not None:
        raise ImageRefused(f"corrupt or unreadable PNG image: {problem}")
    return width, height


def prepare(data: bytes, limits: ImageLimits) -> PreparedImage:
    """The image as the model will receive it. Raises ImageRefused. CPU- and memory-bound: services
    run it in a worker process (shared/pools/image_decoding.py), never on their event loop."""
    mime = sniff(data[:12])
    if mime is None:
        raise ImageRefused("not a PNG, JPEG, GIF or WebP image")
    if len(data) > limits.max_source_bytes:
        raise ImageRefused(f"image is {len(data)} bytes; the limit is {limits.max_source_bytes} bytes", 413)
    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height = _within(im, data, mime, limits)
            animated = getattr(im, "n_frames", 1) > 1
            im.seek(0)
            im.load()
            rotated = im.getexif().get(EXIF_ORIENTATION, 1) not in (1, None)
            size = target_size(width, height, limits)
            if (size == (width, height) and not animated and not rotated and im.mode in _KEEP_MODES
                    and len(data) <= limits.max_stored_bytes):
                return PreparedImage(data, mime, width, height)
            return _reencode(im, mime, limits)
    except ImageRefused:
        raise
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError, UnidentifiedImageError) as exc:
        raise ImageRefused(f"corrupt or unreadable {mime.split('/')[1].upper()} image: {exc}") from exc


def warm() -> None:
    """Run as a decoding worker starts (shared/pools/offload.py): Pillow's format plugins loaded."""
    Image.init()


def _reencode(im: Image.Image, mime: ImageMime, limits: ImageLimits) -> PreparedImage:
    frame = ImageOps.exif_transpose(im) or im
    alpha = frame.mode in ("RGBA", "LA", "PA") or (frame.mode == "P" and "transparency" in frame.info)
    frame = frame.convert("RGBA" if alpha else "RGB")
    size = target_size(frame.width, frame.height, limits)
    if size != frame.size:  # reduced by whole factors first (`reducing_gap`), then resampled
        frame = frame.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    out = io.BytesIO()
    # PNG for what had transparency or was drawn (PNG, GIF); JPEG for photographs.
    if alpha or mime in ("image/png", "image/gif"):
        frame.save(out, format="PNG", optimize=False)
        data = out.getvalue()
        if len(data) <= limits.max_stored_bytes or alpha:
            return PreparedImage(data, "image/png", frame.width, frame.height)
        out = io.BytesIO()
    frame.convert("RGB").save(out, format="JPEG", quality=85)
    return PreparedImage(out.getvalue(), "image/jpeg", frame.width, frame.height)


def read_workspace_image(workspace: Path, rel: str, max_bytes: int) -> bytes:
    """A workspace file's bytes, refused past `max_bytes` before anything is read (opened beneath the
    workspace: a planted link cannot lead out of it). Raises DiskError."""
    opened = workspace_fs.open_entry(workspace, rel)
    try:
        if not stat.S_ISREG(opened.st.st_mode):
            raise DiskError(f"{opened.rel!r} is a directory")
        if opened.st.st_size > max_bytes:
            raise TooLarge(f"{opened.rel} is {opened.st.st_size} bytes; the limit is {max_bytes} bytes")
        os.set_blocking(opened.fd, True)
        with os.fdopen(os.dup(opened.fd), "rb") as fh:
            data = fh.read(max_bytes + 1)
    finally:
        os.close(opened.fd)
    if len(data) > max_bytes:
        raise TooLarge(f"{rel} is over {max_bytes} bytes")
    return data


def image_file(session_root: Path, sha256: str) -> Path:
    return session_root / IMAGES_DIR / sha256


def store_image(session_root: Path, image: PreparedImage, path: str | None = None) -> ImageRef:
    """Write the image once under its content hash and return the reference a message carries."""
    digest = hashlib.sha256(image.data).hexdigest()
    target = image_file(session_root, digest)
    try:
        os.utime(target)  # stored already: fresh again for the collection's grace (shared/media/image_gc.py)
    except FileNotFoundError:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, image.data)
    return ImageRef(sha256=digest, mime_type=image.mime_type, width=image.width, height=image.height,
                    bytes=len(image.data), path=path)


def load_image(session_root: Path, ref: ImageRef) -> bytes | None:
    try:
        return image_file(session_root, ref.sha256).read_bytes()
    except OSError:
        return None


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


class ImageSource:
    """References -> data URLs for one session's requests. URLs are kept up to `kept_bytes`, most
    recently used first: every request of a run carries the same images again, and a base64 copy of
    each per request would cost more than the rest of the request build."""

    def __init__(self, session_root: Path, kept_bytes: int = 32 * 1024 * 1024) -> None:
        self.session_root = session_root
        self.kept_bytes = kept_bytes
        self._urls: OrderedDict[str, str] = OrderedDict()
        self._size = 0

    def url(self, ref: ImageRef) -> str | None:
        """The image's data URL, or None when its file is gone (the request says so in text)."""
        cached = self._urls.get(ref.sha256)
        if cached is not None:
            self._urls.move_to_end(ref.sha256)
            return cached
        data = load_image(self.session_root, ref)
        if data is None:
            return None
        url = data_url(ref.mime_type, data)
        self._urls[ref.sha256] = url
        self._size += len(url)
        while self._size > self.kept_bytes and len(self._urls) > 1:
            self._size -= len(self._urls.popitem(last=False)[1])
        return url


def sniff_workspace_file(workspace: Path, rel: str) -> ImageMime | None:
    """The image type of a workspace file by its first bytes, None for anything else. Raises DiskError."""
    opened = workspace_fs.open_entry(workspace, rel)
    try:
        if not stat.S_ISREG(opened.st.st_mode):
            return None
        os.set_blocking(opened.fd, True)
        return sniff(os.pread(opened.fd, 12, 0))
    finally:
        os.close(opened.fd)
