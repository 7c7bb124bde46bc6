#!/usr/bin/env python3
"""gml: validate, lint, outline, render, number and diff Gamma deck JSON (GML) files.

Standard library only, so it runs in any workspace with python3. Exit 0 ok, 1 deck errors, 2 usage.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

LAYOUTS = {"title", "section", "content", "two-column", "image-left", "image-right", "full-bleed",
           "stats", "quote", "timeline", "closing"}
REQUIRED = {  # block type -> required fields
    "heading": ("text",), "text": ("text",), "bullets": ("items",), "image": (),
    "stat": ("value", "label"), "quote": ("text", "attribution"), "table": ("columns", "rows"),
    "chart": ("kind", "categories", "series"), "callout": ("tone", "text"), "timeline": ("items",),
    "cta": ("label", "href"),
}
CARD_KEYS = {"id", "layout", "title", "blocks", "notes"}
DECK_KEYS = {"title", "theme", "metadata", "assets", "cards"}
CARD_ID = re.compile(r"card_([1-9][0-9]*)")


def load(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as exc:
        print(f"usage error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    try:
        deck = json.loads(text)
    except json.JSONDecodeError as exc:
        print(f"not JSON: line {exc.lineno} column {exc.colno}: {exc.msg}", file=sys.stderr)
        raise SystemExit(2) from exc
    if not isinstance(deck, dict):
        print("not JSON: the deck must be an object", file=sys.stderr)
        raise SystemExit(2)
    return deck


def cards(deck: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in deck.get("cards") or [] if isinstance(c, dict)]


def block_errors(cid: str, i: int, b: Any, layout: str, assets: set[str]) -> list[str]:
    if not isinstance(b, dict) or b.get("type") not in REQUIRED:
        kind = b.get("type") if isinstance(b, dict) else type(b).__name__
        return [f"{cid}: blocks[{i}]: unknown block type {kind!r}"]
    t, where = b["type"], f"{cid}: blocks[{i}] ({b['type']})"
    errs = [f"{where}: missing field '{f}'" for f in REQUIRED[t] if f not in b]
    if errs:
        return errs
    if layout == "two-column" and b.get("slot") not in ("left", "right"):
        errs.append(f"{where}: two-column block without slot 'left' or 'right'")
    if t == "image":
        if "asset" in b and b["asset"] not in assets:
            errs.append(f"{where}: unknown asset {b['asset']!r}")
        elif "asset" not in b and ("src" not in b or not b.get("alt")):
            errs.append(f"{where}: an image needs 'asset', or 'src' with 'alt'")
    if t == "chart":
        if b["kind"] not in ("bar", "line", "pie"):
            errs.append(f"{where}: unknown chart kind {b['kind']!r}")
        for s in b["series"]:
            data = s.get("data", []) if isinstance(s, dict) else []
            if len(data) != len(b["categories"]):
                errs.append(f"{where}: series {s.get('name') if isinstance(s, dict) else s!r} has "
                            f"{len(data)} values for {len(b['categories'])} categories")
            if not all(isinstance(v, (int, float)) for v in data):
                errs.append(f"{where}: chart data must be numbers")
    if t == "table":
        width = len(b["columns"])
        for r, row in enumerate(b["rows"]):
            if len(row) != width:
                errs.append(f"{where}: row {r} has {len(row)} cells for {width} columns")
    if t == "callout" and b["tone"] not in ("info", "success", "warning"):
        errs.append(f"{where}: unknown tone {b['tone']!r}")
    return errs


def validate(deck: dict[str, Any]) -> list[str]:
    errs = [f"deck: unknown key {k!r}" for k in sorted(set(deck) - DECK_KEYS)]
    if not isinstance(deck.get("cards"), list) or not deck["cards"]:
        return errs + ["deck: 'cards' must be a non-empty list"]
    assets = {a.get("id") for a in deck.get("assets") or [] if isinstance(a, dict)}
    seen: set[str] = set()
    for n, card in enumerate(deck["cards"]):
        if not isinstance(card, dict):
            errs.append(f"cards[{n}]: not an object")
            continue
        cid = str(card.get("id", f"cards[{n}]"))
        if not CARD_ID.fullmatch(cid):
            errs.append(f"{cid}: id must look like card_1")
        if cid in seen:
            errs.append(f"{cid}: duplicate card id")
        seen.add(cid)
        errs += [f"{cid}: unknown card key {k!r}" for k in sorted(set(card) - CARD_KEYS)]
        if card.get("layout") not in LAYOUTS:
            errs.append(f"{cid}: unknown layout {card.get('layout')!r}")
        if not isinstance(card.get("title"), str):
            errs.append(f"{cid}: missing field 'title'")
        blocks = card.get("blocks")
        if not isinstance(blocks, list):
            errs.append(f"{cid}: 'blocks' must be a list")
            continue
        for i, b in enumerate(blocks):
            errs += block_errors(cid, i, b, str(card.get("layout")), assets)
    return errs


def words(card: dict[str, Any]) -> int:
    text = " ".join(render_block(b) for b in card.get("blocks", []) if isinstance(b, dict))
    return len(text.split())


def lint(deck: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if not deck.get("title"):
        out.append("deck: no title")
    cs = cards(deck)
    if cs and cs[0].get("layout") != "title":
        out.append(f"{cs[0].get('id')}: the first card should use the 'title' layout")
    if cs and cs[-1].get("layout") != "closing":
        out.append(f"{cs[-1].get('id')}: the last card should use the 'closing' layout")
    used: set[str] = set()
    for c in cs:
        cid = c.get("id")
        if len(str(c.get("title", ""))) > 80:
            out.append(f"{cid}: title longer than 80 characters")
        if words(c) > 90:
            out.append(f"{cid}: {words(c)} words of body text (limit 90); move detail to notes")
        for b in c.get("blocks", []):
            if not isinstance(b, dict):
                continue
            if b.get("type") == "bullets" and not 2 <= len(b.get("items", [])) <= 6:
                out.append(f"{cid}: bullets need 2-6 items, got {len(b.get('items', []))}")
            if b.get("type") == "image" and "src" in b and not b.get("alt"):
                out.append(f"{cid}: image without alt text")
            if "asset" in b:
                used.add(b["asset"])
    for a in deck.get("assets") or []:
        if isinstance(a, dict) and a.get("id") not in used:
            out.append(f"asset {a.get('id')}: not used by any card")
    return out


def render_block(b: dict[str, Any]) -> str:
    t = b.get("type")
    if t in ("heading", "text", "callout"):
        return str(b.get("text", ""))
    if t == "bullets":
        return "\n".join(f"- {i}" for i in b.get("items", []))
    if t == "stat":
        return f"{b.get('value')} {b.get('label')}"
    if t == "quote":
        return f"\"{b.get('text')}\" ({b.get('attribution')})"
    if t == "table":
        return "\n".join(" | ".join(map(str, r)) for r in [b.get("columns", []), *b.get("rows", [])])
    if t == "chart":
        lines = [f"{b.get('kind')} chart"]
        for s in b.get("series", []):
            pairs = zip(b.get("categories", []), s.get("data", []), strict=False)
            lines.append(f"{s.get('name')}: " + ", ".join(f"{c} {v}" for c, v in pairs))
        return "\n".join(lines)
    if t == "timeline":
        return "\n".join(f"{i.get('label')}: {i.get('text')}" for i in b.get("items", []))
    if t == "image":
        return f"[image: {b.get('alt') or b.get('asset')}]"
    if t == "cta":
        return f"[{b.get('label')}]({b.get('href')})"
    return ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gml", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("validate", "lint", "outline", "render", "next-id"):
        sp = sub.add_parser(name)
        sp.add_argument("file")
        if name == "lint":
            sp.add_argument("--strict", action="store_true")
        if name == "render":
            sp.add_argument("--card")
            sp.add_argument("--png", metavar="DIR", help="draw each card as DIR/<card id>.png")
    d = sub.add_parser("diff")
    d.add_argument("old")
    d.add_argument("new")
    a = p.parse_args(argv)

    if a.cmd == "diff":
        return diff(load(a.old), load(a.new))
    deck = load(a.file)
    if a.cmd == "validate":
        errs = validate(deck)
        print("\n".join(errs) if errs else f"OK {len(cards(deck))} cards")
        return 1 if errs else 0
    if a.cmd == "lint":
        findings = lint(deck)
        for f in findings:
            print(f"warning: {f}")
        return 1 if findings and a.strict else 0
    if a.cmd == "outline":
        for c in cards(deck):
            kinds = ", ".join(str(b.get("type")) for b in c.get("blocks", []) if isinstance(b, dict))
            print(f"{c.get('id', '?'):<8}{c.get('layout', '?'):<12}{str(c.get('title', ''))[:40]:<42}[{kinds}]")
        return 0
    if a.cmd == "render" and a.png:
        return render_png(deck, a.png, a.card)
    if a.cmd == "render":
        for c in cards(deck):
            if a.card and c.get("id") != a.card:
                continue
            print(f"== {c.get('id')} ({c.get('layout')}): {c.get('title')}")
            for b in c.get("blocks", []):
                if isinstance(b, dict):
                    print(render_block(b))
            print()
        return 0
    nums = [int(m.group(1)) for c in cards(deck) if (m := CARD_ID.fullmatch(str(c.get("id"))))]
    print(f"card_{max(nums, default=0) + 1}")
    return 0


def render_png(deck: dict[str, Any], out_dir: str, card: str | None) -> int:
    if validate(deck):
        print("the deck has errors: run `gml validate` first", file=sys.stderr)
        return 1
    try:
        import gml_png  # Pillow is needed only here; the other commands stay standard-library only
    except ImportError as exc:
        print(f"usage error: render --png needs Pillow ({exc})", file=sys.stderr)
        return 2
    try:
        for path in gml_png.render_png(deck, out_dir, CARD_ID, card):
            print(path)
    except OSError as exc:
        print(f"usage error: {exc}", file=sys.stderr)
        return 2
    return 0


def diff(old: dict[str, Any], new: dict[str, Any]) -> int:
    before = {c.get("id"): c for c in cards(old)}
    after = {c.get("id"): c for c in cards(new)}
    for key in ("title", "theme", "metadata", "assets"):
        if old.get(key) != new.get(key):
            print(f"changed {key}")
    for cid in after:
        if cid not in before:
            print(f"added {cid}")
        elif after[cid] != before[cid]:
            print(f"changed {cid}")
    for cid in before:
        if cid not in after:
            print(f"removed {cid}")
    common_old = [c for c in before if c in after]
    common_new = [c for c in after if c in before]
    if common_old != common_new:
        print("moved: order is now " + " ".join(map(str, common_new)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
