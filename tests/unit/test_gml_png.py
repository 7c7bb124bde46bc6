"""`gml render --png DIR` (skills/gml-cli): every layout of the authoring guide drawn as a decodable,
deterministic PNG; hostile decks give an error or a safe render and nothing lands outside DIR."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[2]
GML = REPO / "skills" / "gml-cli" / "scripts" / "gml.py"


def gml(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GML), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def layouts() -> list[str]:
    body = (REPO / "skills" / "gml-authoring" / "SKILL.md").read_text(encoding="utf-8")
    table = body.split("## Layouts", 1)[1].split("## Blocks", 1)[0]
    names = [n for row in table.splitlines() if row.startswith("| `") for n in row.split("|")[1].split("`")[1::2]]
    assert len(names) >= 10, names
    return names


def blocks_for(layout: str) -> list[dict[str, object]]:
    text = {"type": "text", "text": "Revenue grew 14% in Q3 on enterprise renewals."}
    bullets = {"type": "bullets", "items": ["Pipeline up 22%", "Churn down to 3%", "Two new regions"]}
    chart = {"type": "chart", "kind": "bar", "categories": ["Q1", "Q2", "Q3"],
             "series": [{"name": "Revenue", "data": [3.1, 4.0, 4.8]}, {"name": "Cost", "data": [2, 2.2, 2.5]}]}
    line = {**chart, "kind": "line"}
    table = {"type": "table", "columns": ["Region", "Q3"], "rows": [["EMEA", "$1.2M"], ["APAC", "$0.9M"]]}
    image = {"type": "image", "asset": "asset_logo"}
    return {
        "title": [text, image], "section": [text], "content": [text, bullets, chart],
        "two-column": [{**bullets, "slot": "left"}, {**table, "slot": "right"}],
        "image-left": [image, bullets], "image-right": [image, text], "full-bleed": [image, text],
        "stats": [{"type": "stat", "value": "$4.8M", "label": "Q3 revenue"},
                  {"type": "stat", "value": "22%", "label": "pipeline growth"}],
        "quote": [{"type": "quote", "text": "It paid for itself in a month.", "attribution": "A customer"}],
        "timeline": [{"type": "timeline", "items": [{"label": "Q1", "text": "Pilot"}, {"label": "Q2", "text": "GA"},
                                                    {"label": "Q3", "text": "Scale"}]}],
        "closing": [text, {"type": "cta", "label": "Book a demo", "href": "https://example.com"}, line],
    }[layout]


def deck(tmp: Path) -> Path:
    (tmp / "uploads").mkdir(exist_ok=True)
    Image.new("RGB", (400, 200), (200, 40, 40)).save(tmp / "uploads" / "logo.png")
    cards = [{"id": f"card_{n}", "layout": lay, "title": f"{lay} card", "blocks": blocks_for(lay)}
             for n, lay in enumerate(layouts(), 1)]
    doc = {"title": "Q3", "assets": [{"id": "asset_logo", "kind": "image", "src": "file:uploads/logo.png",
                                      "alt": "Red logo"}], "cards": cards}
    path = tmp / "deck.json"
    path.write_text(json.dumps(doc))
    return path


def digests(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def test_every_layout_renders_a_decodable_png_and_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    deck(tmp_path)
    first = gml(tmp_path, "render", "deck.json", "--png", "out1")
    assert first.returncode == 0, first.stderr
    second = gml(tmp_path, "render", "deck.json", "--png", "out2")
    assert second.returncode == 0, second.stderr
    n = len(layouts())
    assert first.stdout.split() == [f"out1/card_{i}.png" for i in range(1, n + 1)]
    for p in (tmp_path / "out1").iterdir():
        with Image.open(p) as im:
            im.load()
            assert im.format == "PNG" and im.size == (1280, 720)
            assert len(im.getcolors(1 << 20) or []) > 3  # something was drawn on the white card
    assert digests(tmp_path / "out1") == digests(tmp_path / "out2")
    # the asset really lands on the card: the logo's red appears on the title card
    with Image.open(tmp_path / "out1" / "card_1.png") as im:
        assert (200, 40, 40) in {c for _, c in im.getcolors(1 << 20) or []}
    one = gml(tmp_path, "render", "deck.json", "--png", "only", "--card", "card_3")
    assert one.returncode == 0 and [p.name for p in (tmp_path / "only").iterdir()] == ["card_3.png"]


def test_a_deck_with_errors_is_refused_without_writing(tmp_path: Path) -> None:
    bad = {"title": "x", "cards": [{"id": "card_1", "layout": "title", "title": "t",
                                    "blocks": [{"type": "image", "asset": "asset_missing"}]}]}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    res = gml(tmp_path, "render", "bad.json", "--png", "out")
    assert res.returncode == 1 and "validate" in res.stderr and not (tmp_path / "out").exists()


def test_hostile_deck_renders_safely_inside_dir_only(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    secret = tmp_path / "secret.png"
    Image.new("RGB", (50, 50), (1, 2, 3)).save(secret)
    (work / "link.png").symlink_to(secret)
    srcs = ["file:../secret.png", f"file:{secret}", "file:/etc/passwd", "file:link.png", "file:nope.png",
            "https://example.com/x.png", "file:uploads/../../secret.png"]
    assets = [{"id": f"asset_{i}", "kind": "image", "src": s, "alt": "x"} for i, s in enumerate(srcs)]
    huge = "word " * 50_000 + "x" * 100_000
    cards = [{"id": "card_1", "layout": "content", "title": "T" * 5000,
              "blocks": [{"type": "text", "text": huge}, {"type": "bullets", "items": [huge] * 500}]},
             {"id": "card_2", "layout": "content", "title": "assets",
              "blocks": [{"type": "image", "asset": a["id"]} for a in assets]}]
    (work / "deck.json").write_text(json.dumps({"title": "h", "assets": assets, "cards": cards}))
    out = work / "out"
    out.mkdir()
    planted = tmp_path / "planted.png"
    (out / "card_2.png").symlink_to(planted)  # a planted link must not redirect the write
    before = sorted(p.name for p in tmp_path.iterdir())
    res = gml(work, "render", "deck.json", "--png", "out")
    assert res.returncode == 2 and "usage error" in res.stderr, res
    assert not planted.exists() and sorted(p.name for p in tmp_path.iterdir()) == before
    os.unlink(out / "card_2.png")
    res = gml(work, "render", "deck.json", "--png", "out")
    assert res.returncode == 0, res.stderr
    with Image.open(out / "card_2.png") as im:
        assert im.size == (1280, 720)
        colors = {c for _, c in im.getcolors(1 << 20) or []}
    assert (1, 2, 3) not in colors  # no reference reached the file outside the workspace
    with Image.open(out / "card_1.png") as im:
        assert im.size == (1280, 720)
    assert sorted(p.name for p in out.iterdir()) == ["card_1.png", "card_2.png"]
