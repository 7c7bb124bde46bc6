"""The brand-asset library: a directory with `colours.json` (the palette) and image files. Pure reads;
every answer is bounded (at most MAX_IMAGES listed, texts cut) so it fits a connector result."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from shared.contracts.records.connectors import ConnectorSpec, ConnectorTool
from shared.mcp.tool_schema import ToolArgs, optional, parameters_of

IMAGE_TYPES = {".svg": "image/svg+xml", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
               ".webp": "image/webp"}
MAX_IMAGES = 20
MAX_SVG_INLINE = 4096  # an SVG this small is answered with its markup
Role = Literal["primary", "secondary", "accent", "neutral"]


class UnknownTool(LookupError):
    pass


class ColoursArgs(ToolArgs):
    role: Role = optional()


class ImagesArgs(ToolArgs):
    query: str = Field(min_length=1, max_length=100)
    limit: int = optional(ge=1, le=MAX_IMAGES)


class KitArgs(ToolArgs):
    pass


def spec() -> ConnectorSpec:
    """What the library registers: three tools, `kit` answered `accepted` and finished later; each tool's
    parameters are its argument model's schema (shared/mcp/tool_schema.py)."""
    return ConnectorSpec(description="The brand-asset library: the brand's colour palette and its logo and "
                         "pattern images.", tools=[
        ConnectorTool(name="colours", description="The brand colours (name, hex, role), optionally of one role.",
                      parameters=parameters_of(ColoursArgs), timeout_s=30),
        ConnectorTool(name="images", description="Find brand images by name; each with its type, size, SHA-256 "
                      "and, for a small SVG, its markup.", parameters=parameters_of(ImagesArgs), timeout_s=30),
        ConnectorTool(name="kit", description="Assemble the whole brand kit (palette and every image with its "
                      "checksum). Long-running: answered later as a background result.",
                      parameters=parameters_of(KitArgs), timeout_s=30),
    ])


class BrandLibrary:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _palette(self) -> dict[str, Any]:
        data = json.loads((self.root / "colours.json").read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {"colours": []}

    def colours(self, role: str | None = None) -> dict[str, Any]:
        p = self._palette()
        found = [c for c in p.get("colours", []) if role is None or c.get("role") == role]
        return {"brand": p.get("brand"), "colours": found}

    def _image(self, path: Path, inline: bool) -> dict[str, Any]:
        raw = path.read_bytes()
        out: dict[str, Any] = {"name": path.name, "media_type": IMAGE_TYPES[path.suffix.lower()], "bytes": len(raw),
                               "sha256": hashlib.sha256(raw).hexdigest()}
        if inline and path.suffix.lower() == ".svg" and len(raw) <= MAX_SVG_INLINE:
            out["svg"] = raw.decode("utf-8", errors="replace")
        return out

    def _files(self) -> list[Path]:
        return sorted(p for p in self.root.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_TYPES)

    def images(self, query: str, limit: int = 5) -> dict[str, Any]:
        words = [w for w in re.split(r"[^a-z0-9]+", query.lower()) if w]
        hits = [p for p in self._files() if all(w in p.name.lower() for w in words)]
        return {"query": query, "images": [self._image(p, True) for p in hits[: min(limit, MAX_IMAGES)]],
                "total": len(hits)}

    def kit(self) -> dict[str, Any]:
        return {**self.colours(), "images": [self._image(p, False) for p in self._files()[:MAX_IMAGES]]}

    def answer(self, tool: str, args: dict[str, Any]) -> str:
        """The JSON text answering one call (`kit` is the caller's to finish later)."""
        if tool == "colours":
            return json.dumps(self.colours(args.get("role")), ensure_ascii=False)
        if tool == "images":
            return json.dumps(self.images(str(args["query"]), int(args.get("limit", 5))), ensure_ascii=False)
        if tool == "kit":
            return json.dumps(self.kit(), ensure_ascii=False)
        raise UnknownTool(tool)
