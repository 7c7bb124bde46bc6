"""`gml render --png DIR`: each card of a deck drawn as a 1280x720 PNG with Pillow's ImageDraw.

Deterministic (fixed size, Pillow's bundled font, no timestamps or text chunks in the PNG) so the
same deck gives the same bytes. Everything in the deck is untrusted: text is cut to a bounded length
and clipped to its box, and an asset is read only from a regular file inside the current directory
(no absolute paths, no `..`, no symlinks out); anything else is drawn as a labelled placeholder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

W, H, PAD = 1280, 720, 48
MAX_CHARS = 2000  # per text run: a hostile deck cannot make wrapping quadratic
MAX_ASSET_BYTES = 20 * 1024 * 1024
Image.MAX_IMAGE_PIXELS = 40_000_000  # decompression bombs raise instead of filling memory
INK, MUTED, ACCENT, LINE, BG = (24, 24, 32), (96, 96, 110), (64, 92, 230), (210, 210, 220), (255, 255, 255)
PALETTE = ((64, 92, 230), (230, 120, 40), (40, 160, 100), (200, 60, 90))
_fonts: dict[int, Any] = {}


def font(size: int) -> Any:
    if size not in _fonts:
        try:
            _fonts[size] = ImageFont.load_default(size=size)
        except TypeError:  # Pillow < 10.1 has only the fixed bitmap font
            _fonts[size] = ImageFont.load_default()
    return _fonts[size]


def clean(s: str, f: Any) -> str:
    """Pillow's fixed bitmap font (Pillow < 10.1) covers Latin-1 only; others become '?'."""
    if isinstance(f, ImageFont.ImageFont):
        return s.encode("latin-1", "replace").decode("latin-1")
    return s


def text_w(draw: ImageDraw.ImageDraw, s: str, f: Any) -> float:
    return float(draw.textlength(s, font=f))


def wrap(draw: ImageDraw.ImageDraw, text: str, f: Any, width: int) -> list[str]:
    lines: list[str] = []
    for para in clean(str(text)[:MAX_CHARS], f).splitlines() or [""]:
        line = ""
        for word in para.split():
            while text_w(draw, word, f) > width and len(word) > 1:  # one overlong word: hard-break it
                cut = max(1, int(len(word) * width / text_w(draw, word, f)))
                if line:
                    lines.append(line)
                    line = ""
                lines.append(word[:cut])
                word = word[cut:]
            cand = f"{line} {word}".strip()
            if line and text_w(draw, cand, f) > width:
                lines.append(line)
                line = word
            else:
                line = cand
        lines.append(line)
    return lines


class Box:
    """A column of the card that blocks are stacked into top to bottom; nothing is drawn past its end."""

    def __init__(self, draw: ImageDraw.ImageDraw, img: Image.Image, x: int, y: int, w: int, bottom: int) -> None:
        self.draw, self.img, self.x, self.y, self.w, self.bottom = draw, img, x, y, w, bottom

    def text(self, s: str, size: int = 24, fill: tuple[int, int, int] = INK, indent: int = 0) -> None:
        f = font(size)
        for line in wrap(self.draw, s, f, self.w - indent):
            if self.y + size > self.bottom:
                return
            self.draw.text((self.x + indent, self.y), line, font=f, fill=fill)
            self.y += int(size * 1.3)
        self.y += 8

    def room(self, want: int) -> int:
        return max(0, min(want, self.bottom - self.y))


def safe_asset(src: str, root: Path) -> Path | None:
    """A `file:` reference to a regular file under root, or None."""
    if not src.startswith("file:"):
        return None
    rel = src[5:]
    if not rel or rel.startswith("/") or "\\" in rel or ".." in Path(rel).parts or "\x00" in rel:
        return None
    try:
        path = (root / rel).resolve(strict=True)
        path.relative_to(root)
    except (OSError, ValueError):
        return None
    return path if path.is_file() and path.stat().st_size <= MAX_ASSET_BYTES else None


def draw_image(box: Box, src: str, label: str, root: Path) -> None:
    h = box.room(300)
    if h < 40:
        return
    area = (box.x, box.y, box.x + box.w, box.y + h)
    path = safe_asset(src, root)
    pic = None
    if path is not None:
        try:
            with Image.open(path) as im:
                im.thumbnail((box.w, h))
                pic = im.convert("RGB")
        except (OSError, ValueError, Image.DecompressionBombError):
            pic = None
    if pic is None:
        box.draw.rectangle(area, outline=LINE, fill=(244, 244, 248))
        box.draw.text((box.x + 12, box.y + 12), clean(f"[image: {label}]"[:120], font(18)), font=font(18),
                      fill=MUTED)
    else:
        box.img.paste(pic, (box.x, box.y))
        h = pic.height
    box.y += h + 12


def draw_chart(box: Box, b: dict[str, Any]) -> None:
    cats = [str(c)[:20] for c in b.get("categories", [])][:24]
    series = [s for s in b.get("series", []) if isinstance(s, dict)][:4]
    vals = [[v for v in s.get("data", [])[:len(cats)] if isinstance(v, (int, float))] for s in series]
    h = box.room(280)
    if not cats or h < 80:
        return
    top = max([abs(float(v)) for row in vals for v in row] or [1.0]) or 1.0
    x0, y0, x1, y1 = box.x + 8, box.y + 24, box.x + box.w - 8, box.y + h - 28  # legend row on top
    box.draw.line((x0, y1, x1, y1), fill=MUTED, width=2)
    step = (x1 - x0) / len(cats)
    for i, c in enumerate(cats):
        box.draw.text((x0 + i * step + 4, y1 + 6), clean(c, font(14)), font=font(14), fill=MUTED)
    for k, row in enumerate(vals):
        color = PALETTE[k % len(PALETTE)]
        name = clean(str(series[k].get("name", ""))[:30], font(14))
        box.draw.rectangle((x0 + k * 220, box.y + 2, x0 + k * 220 + 12, box.y + 14), fill=color)
        box.draw.text((x0 + k * 220 + 18, box.y), name, font=font(14), fill=INK)
        pts = [(x0 + (i + 0.5) * step, y1 - (y1 - y0) * max(0.0, float(v)) / top) for i, v in enumerate(row)]
        if b.get("kind") == "line":
            if len(pts) > 1:
                box.draw.line(pts, fill=color, width=3)
        else:
            bw = step * 0.8 / max(1, len(vals))
            for i, (_, py) in enumerate(pts):
                left = x0 + i * step + step * 0.1 + k * bw
                box.draw.rectangle((left, py, left + bw - 2, y1), fill=color)
    box.y += h + 8


def draw_table(box: Box, b: dict[str, Any]) -> None:
    rows = [[str(c) for c in b.get("columns", [])][:8]] + [[str(c) for c in r][:8] for r in b.get("rows", [])
                                                            if isinstance(r, list)][:12]
    width = max((len(r) for r in rows), default=0)
    if not width:
        return
    cw, f = box.w / width, font(18)
    for n, row in enumerate(rows):
        if box.y + 30 > box.bottom:
            return
        if n == 0:
            box.draw.rectangle((box.x, box.y, box.x + box.w, box.y + 30), fill=(236, 238, 250))
        for i, cell in enumerate(row):
            clipped = wrap(box.draw, cell, f, int(cw) - 12)[0]
            box.draw.text((box.x + i * cw + 6, box.y + 6), clipped, font=f, fill=INK)
        box.y += 30
        box.draw.line((box.x, box.y, box.x + box.w, box.y), fill=LINE)
    box.y += 12


def draw_block(box: Box, b: dict[str, Any], assets: dict[str, dict[str, Any]], root: Path) -> None:
    t = b.get("type")
    if t == "heading":
        box.text(str(b.get("text", "")), 30)
    elif t in ("text", "callout", "cta"):
        box.text(str(b.get("text", b.get("label", ""))), 24, ACCENT if t == "cta" else INK)
    elif t == "bullets":
        for item in b.get("items", [])[:20]:
            box.text(f"- {item}", 24, indent=8)
    elif t == "stat":
        box.text(str(b.get("value", "")), 48, ACCENT)
        box.text(str(b.get("label", "")), 20, MUTED)
    elif t == "quote":
        box.text(f"\"{b.get('text', '')}\"", 30)
        box.text(f"- {b.get('attribution', '')}", 20, MUTED)
    elif t == "timeline":
        for item in b.get("items", [])[:10]:
            if isinstance(item, dict):
                box.text(f"{item.get('label', '')}: {item.get('text', '')}", 22)
    elif t == "chart":
        draw_chart(box, b)
    elif t == "table":
        draw_table(box, b)
    elif t == "image":
        asset = assets.get(str(b.get("asset")), {})
        src = str(asset.get("src") or b.get("src") or "")
        draw_image(box, src, str(b.get("alt") or asset.get("alt") or b.get("asset") or src), root)


def render_card(card: dict[str, Any], assets: dict[str, dict[str, Any]], root: Path) -> Image.Image:
    img = Image.new("RGB", (W, H), BG)
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, W, 8), fill=ACCENT)
    head = Box(draw, img, PAD, PAD, W - 2 * PAD, 160)
    head.text(str(card.get("title", "")), 44 if card.get("layout") in ("title", "section", "closing") else 38)
    blocks = [b for b in card.get("blocks", []) if isinstance(b, dict)][:40]
    top = max(head.y, 120)
    if card.get("layout") in ("two-column", "image-left", "image-right"):
        half = (W - 3 * PAD) // 2
        left = Box(draw, img, PAD, top, half, H - PAD)
        right = Box(draw, img, 2 * PAD + half, top, half, H - PAD)
        for b in blocks:
            if card.get("layout") == "two-column":
                side = right if b.get("slot") == "right" else left
            else:
                side = left if (b.get("type") == "image") == (card.get("layout") == "image-left") else right
            draw_block(side, b, assets, root)
    else:
        body = Box(draw, img, PAD, top, W - 2 * PAD, H - PAD)
        for b in blocks:
            draw_block(body, b, assets, root)
    return img


def out_name(card: dict[str, Any], n: int, valid_id: Any) -> str:
    cid = str(card.get("id"))
    return f"{cid}.png" if valid_id.fullmatch(cid) else f"cards-{n}.png"


def render_png(deck: dict[str, Any], out_dir: str, valid_id: Any, only: str | None = None) -> list[str]:
    """Writes one PNG per card into out_dir (created if missing); returns the paths written."""
    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    root = Path(os.getcwd()).resolve()
    assets = {str(a.get("id")): a for a in deck.get("assets") or [] if isinstance(a, dict)}
    written = []
    for n, card in enumerate(c for c in deck.get("cards") or [] if isinstance(c, dict)):
        if only and card.get("id") != only:
            continue
        path = target / out_name(card, n, valid_id)
        # O_NOFOLLOW: a planted symlink named like a card cannot redirect the write outside out_dir.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            render_card(card, assets, root).save(fh, format="PNG", optimize=False)
        written.append(str(path))
    return written
