// A tool item opened by a click stays open when the timeline re-renders before the details' "toggle"
// event has fired (tests/e2e/test_timeline_toggle.py). The inspector's own modules, served from
// services/proxy/static through a routed origin (module scripts do not load from file://).
//   node tests/js/timeline_toggle.mjs CHROMIUM STATIC_DIR
// Prints one JSON object: whether the re-rendered item was open right away and once the events fired,
// after a click and after a second one.
import { readFile } from "node:fs/promises";
import { chromium } from "playwright-core";

const [executablePath, staticDir] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath, headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"] });
const out = {};
try {
  const page = await browser.newPage();
  await page.route("http://inspector.test/**", async (route) => {
    const path = new URL(route.request().url()).pathname;
    if (path === "/") return route.fulfill({ contentType: "text/html", body: '<div id="timeline"></div>' });
    return route.fulfill({ contentType: "text/javascript", body: await readFile(staticDir + path, "utf8") });
  });
  await page.goto("http://inspector.test/");
  out.afterClick = await page.evaluate(clickThenRender);
  out.afterSecondClick = await page.evaluate(clickThenRender);
} catch (err) {
  out.error = String((err && err.stack) || err);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));

// In the page: render one finished tool call, click its summary, re-render at once (as an event arriving
// in the same task would), then read the new element's state.
async function clickThenRender() {
  const { renderTimeline } = await import("/js/timeline.js");
  const box = document.getElementById("timeline");
  const items = [{ kind: "tool", key: "t1", name: "bash", args: { command: "sleep 30" },
    result: { isError: true, text: "stopped the run" } }];
  renderTimeline(box, items);
  box.querySelector("details.item.tool summary").click();
  renderTimeline(box, items);
  const rightAway = box.querySelector("details.item.tool").open;
  await new Promise((resolve) => setTimeout(resolve, 50));  // every queued toggle event has fired
  renderTimeline(box, items);
  return [rightAway, box.querySelector("details.item.tool").open];
}
