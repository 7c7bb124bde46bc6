"""Settings of images and attachments (docs/architecture.md "Images")."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.media.image_limits import ImageLimits
from shared.settings.area import Area


class ImageSettings(Area):
    """What the agent sees of image files and attachments."""

    # `detail` goes with every image part; the sides are OpenAI's high-detail fit (long, then short).
    image_detail: Literal["auto", "low", "high"] = Field("auto", validation_alias="GAMMA_IMAGE_DETAIL",
        description="The `detail` of every image part sent to the model (`auto`, `low`, `high`).")
    image_max_long: int = Field(2048, ge=64, le=8192, validation_alias="GAMMA_IMAGE_MAX_LONG",
        description="An image is downscaled (aspect ratio kept) until its long side fits this (pixels).")
    image_max_short: int = Field(768, ge=64, le=8192, validation_alias="GAMMA_IMAGE_MAX_SHORT",
        description="An image is downscaled (aspect ratio kept) until its short side fits this (pixels).")
    image_max_source_bytes: int = Field(20 * 1024 * 1024, ge=1024, validation_alias="GAMMA_IMAGE_MAX_SOURCE_BYTES",
        description="An image file past this is refused (a `read` error result, a 413 for an attachment) before it is"
                    " decoded.")
    image_max_pixels: int = Field(50_000_000, ge=1, validation_alias="GAMMA_IMAGE_MAX_PIXELS",
        description="An image past this many pixels is refused (a `read` error result, a 413 for an attachment) "
                    "before it is decoded.")
    image_max_decoded_bytes: int = Field(128 * 1024 * 1024, ge=1024 * 1024, validation_alias="GAMMA_IMAGE_MAX_DECODED_BYTES",
        description="An image whose decoded pixels would take more than this (width x height x bands x bytes per sample,"
                    " from its header) is refused (a `read` error result, a 413 for an attachment) before it is decoded.")
    image_decode_workers: int = Field(2, ge=1, le=16, validation_alias="GAMMA_IMAGE_DECODE_WORKERS",
        description="Worker processes that decode images, per service process: the decodes in flight there "
                    "(`shared/pools/image_decoding.py`); past a 5 s wait for one, a 503.")
    image_decodes_per_user: int = Field(2, ge=1, le=16, validation_alias="GAMMA_IMAGE_DECODES_PER_USER",
        description="Images one user may have decoding at once per service process; past a 2 s wait, a 429.")
    image_decode_timeout_s: float = Field(10.0, gt=0, le=120, validation_alias="GAMMA_IMAGE_DECODE_TIMEOUT_S",
        description="A decode still running after this is stopped (its worker killed) and the image refused; the "
                    "refusal is remembered by the file's hash.")
    image_decode_memory_bytes: int = Field(1024 * 1024 * 1024, ge=256 * 1024 * 1024,
        validation_alias="GAMMA_IMAGE_DECODE_MEMORY_BYTES",
        description="The address space of one image-decoding worker process (RLIMIT_AS); a decode past it fails.")
    images_gc_grace_s: float = Field(3600.0, ge=0, validation_alias="GAMMA_IMAGES_GC_GRACE_S",
        description="An image no transcript entry names is removed when its session closes, once older than this "
                    "(`shared/media/image_gc.py`; a prompt's attachments are stored before the prompt is recorded).")
    attachments_max: int = Field(10, ge=0, le=100, validation_alias="GAMMA_ATTACHMENTS_MAX",
        description="Files attached to one message.")
    attachments_max_bytes: int = Field(40 * 1024 * 1024, ge=1024, validation_alias="GAMMA_ATTACHMENTS_MAX_BYTES",
        description="Bytes of the files attached to one message, together.")

    def image_limits(self) -> ImageLimits:
        return ImageLimits(max_source_bytes=self.image_max_source_bytes, max_pixels=self.image_max_pixels,
                           max_long=self.image_max_long, max_short=self.image_max_short,
                           max_decoded_bytes=self.image_max_decoded_bytes)
