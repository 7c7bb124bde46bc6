// The inspector's branch points (tests/e2e/test_branches_pane.py).
//   node tests/js/branches.mjs BASE_URL TOKEN CHROMIUM SESSION_ID SHOT_PATH
// Prints one JSON object: the branch point shown for a session rewound once, and the page after a
// click on "switch" (a rewind to the other branch's leaf).
import { chromium } from "playwright-core";

const [base, token, executablePath, sid, shot] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath, headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"] });
const out = { consoleErrors: [] };
const LONG = { timeout: 60000 };
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on("console", (m) => { if (m.type() === "error") out.consoleErrors.push(m.text()); });
  await page.goto(`${base}/?token=${encodeURIComponent(token)}`);
  await page.click(`#sessions li[data-sid="${sid}"] button`);
  await page.locator("#timeline .branch-point").waitFor(LONG);
  out.before = await page.$$eval("#timeline .branch-point li.branch", (lis) => lis.map((li) => [li.textContent, li.classList.contains("active")]));
  out.rewoundNotes = await page.locator("#timeline .item.rewound").count();
  out.userTextsBefore = await page.$$eval("#timeline .bubble.user .text", (els) => els.map((e) => e.textContent));
  await page.screenshot({ path: shot });
  await page.click("#timeline .branch-point button.switch");
  await page.waitForFunction(() => document.getElementById("notice").textContent.startsWith("rewound to"), null, LONG);
  // the branch that was not shown is shown now (the first, older one)
  await page.waitForFunction(() => document.querySelector("#timeline .branch-point li.branch")?.classList.contains("active"), null, LONG);
  out.after = await page.$$eval("#timeline .branch-point li.branch", (lis) => lis.map((li) => [li.textContent, li.classList.contains("active")]));
  out.userTextsAfter = await page.$$eval("#timeline .bubble.user .text", (els) => els.map((e) => e.textContent));
  out.notice = await page.textContent("#notice");
} catch (err) {
  out.error = String(err && err.stack || err);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
