// The inspector's workflow checklist pane (tests/e2e/test_checklist_pane.py).
//   node tests/js/checklist.mjs BASE_URL TOKEN CHROMIUM SESSION_ID SHOT_PATH
// Prints one JSON object: what the pane showed for a session whose deck workflow finished.
import { chromium } from "playwright-core";

const [base, token, executablePath, sid, shot] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath, headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"] });
const out = { consoleErrors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on("console", (m) => { if (m.type() === "error") out.consoleErrors.push(m.text()); });
  await page.goto(`${base}/?token=${encodeURIComponent(token)}`);
  out.emptyText = await page.textContent("#checklist");
  await page.click(`#sessions li[data-sid="${sid}"] button`);
  const pane = page.locator('#checklist .checklist[data-workflow="deck-generation"]');
  await pane.waitFor({ timeout: 60000 });
  // the final audit has arrived and the contract ended (docs/architecture.md "Skill contracts")
  await page.waitForFunction(() => document.querySelector('#checklist .checklist[data-ended="true"] .checklist-head .chip'), null, { timeout: 60000 });
  out.position = await page.textContent("#checklist .checklist-position");
  out.audit = await page.textContent("#checklist .checklist-head .chip");
  out.steps = await page.$$eval("#checklist .checklist-steps li", (lis) => lis.map((li) => [li.dataset.step, li.dataset.status]));
  out.heading = await page.textContent("#h-checklist");
  out.ended = await pane.getAttribute("data-ended");
  out.deviations = await page.$$eval("#checklist .checklist-steps li .deviation", (ds) => ds.map((d) => [d.closest("li").dataset.step, d.textContent]));
  await pane.screenshot({ path: shot });
} catch (err) {
  out.error = String(err && err.stack || err);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
