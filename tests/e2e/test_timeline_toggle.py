"""The inspector's timeline remembers a tool item opened by a click even when it re-renders before the
details' "toggle" event fires (services/proxy/static/js/timeline.js `collapsible`): the timeline is
rebuilt at every event, and an item clicked open just before one came back closed (the stop scenario of
tests/e2e/test_inspector.py waited for it 90 s). Headless Chromium, the inspector's own modules; no stack."""

from __future__ import annotations

import json
import subprocess

from tests.e2e.test_inspector import CHROMIUM, NODE, ROOT, pytestmark  # noqa: F401 - the same skip


def test_an_item_clicked_open_stays_open_through_a_render_and_a_second_click_closes_it() -> None:
    assert NODE is not None and CHROMIUM is not None
    run = subprocess.run([NODE, str(ROOT / "tests" / "js" / "timeline_toggle.mjs"), CHROMIUM,
                          str(ROOT / "services" / "proxy" / "static")], cwd=ROOT, capture_output=True, text=True,
                         timeout=90)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert "error" not in out, out["error"]
    assert out == {"afterClick": [True, True], "afterSecondClick": [False, False]}
