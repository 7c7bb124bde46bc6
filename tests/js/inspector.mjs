// Drives the session inspector in headless Chromium (tests/e2e/test_inspector.py).
//   node tests/js/inspector.mjs BASE_URL TOKEN CHROMIUM SCREENSHOT
// Prints one JSON object: what the page showed at each step.
import { chromium } from "playwright-core";

const [base, token, executablePath, screenshot] = process.argv.slice(2);
const message = "hello from the browser";
const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"],
});
const out = { consoleErrors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(90000); // two shared cores under a whole test run: be generous
  page.on("console", (msg) => { if (msg.type() === "error") out.consoleErrors.push(msg.text()); });
  page.on("pageerror", (err) => out.consoleErrors.push(String(err)));
  await page.goto(`${base}/?token=${encodeURIComponent(token)}`);
  await page.waitForSelector("#sessions li");
  out.urlAfterLoad = page.url();
  out.storedToken = await page.evaluate(() => localStorage.getItem("gamma.token"));

  await page.click("#new-session");
  await page.waitForFunction(() => document.getElementById("session-title").textContent.startsWith("s_"));
  await page.waitForFunction(() => document.getElementById("badge").textContent !== "–"); // first refresh done
  out.sessionId = await page.textContent("#session-title");
  out.badgeBefore = await page.textContent("#badge");

  await page.fill("#message", message);
  await page.click("#send");
  const reply = page.locator(".msg.message_user", { hasText: `You said: '${message}'` });
  await reply.waitFor({ timeout: 90000 });
  out.reply = await reply.first().textContent();
  await page.waitForFunction(() => document.getElementById("badge").textContent === "live", null, { timeout: 90000 });
  out.badgeLive = await page.textContent("#badge");
  out.userBubbles = await page.locator(".msg.user").allTextContents();
  await page.waitForSelector("#transcript li");
  out.transcriptEntries = await page.locator("#transcript li").count();
  out.trustedEntries = await page.locator("#transcript li.trusted").count();
  out.trustedTags = await page.locator("#transcript .tag.trusted").allTextContents();
  out.eventTypes = await page.locator("#events .tag").allTextContents();
  out.sessionsListed = await page.locator("#sessions li").count();
  await page.screenshot({ path: screenshot, fullPage: true });

  await page.click("#suspend");
  await page.waitForFunction(() => document.getElementById("badge").textContent === "dormant", null, { timeout: 90000 });
  out.badgeAfterSuspend = await page.textContent("#badge");
} catch (err) {
  out.error = String(err && err.stack || err);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
