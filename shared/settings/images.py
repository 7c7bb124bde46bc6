"""Settings of images and attachments (docs/architecture.md "Images")."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.image_limits import ImageLimits
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
    images_gc_grace_s: float = Field(3600.0, ge=0, validation_alias="GAMMA_IMAGES_GC_GRACE_S",
        description="An image no transcript entry names is removed when its session closes, once older than this "
                    "(`shared/image_gc.py`; a prompt's attachments are stored before the prompt is recorded).")
    attachments_max: int = Field(10, ge=0, le=100, validation_alias="GAMMA_ATTACHMENTS_MAX",
        description="Files attached to one message.")
    attachments_max_bytes: int = Field(40 * 1024 * 1024, ge=1024, validation_alias="GAMMA_ATTACHMENTS_MAX_BYTES",
        description="Bytes of the files attached to one message, together.")

    def image_limits(self) -> ImageLimits:
        return ImageLimits(max_source_bytes=self.image_max_source_bytes, max_pixels=self.image_max_pixels,
                           max_long=self.image_max_long, max_short=self.image_max_short)
