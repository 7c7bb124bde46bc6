// The inspector's images and attachments (tests/e2e/test_inspector.py).
//   node tests/js/images.mjs BASE_URL TOKEN CHROMIUM SESSION_ID SHOTS_DIR HOSTILE_NAME
// The session has a user message with an attached PNG and a `read` of a PNG. Prints one JSON object:
// the thumbnails' natural sizes, the enlarged view opened and closed (Escape, click), the picker's
// listing, and a message sent with files attached by the picker, a drag from the workspace list and
// a drop from the computer. Screenshots go to SHOTS_DIR.
import { chromium } from "playwright-core";

const [base, token, executablePath, sid, shots, hostile] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath, headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"] });
const out = { consoleErrors: [] };
const LONG = { timeout: 60000 };
const loaded = (sel) => `[...document.querySelectorAll(${JSON.stringify(sel)})].every((i) => i.complete && i.naturalWidth > 0)`;
// A picture for the docs, of an element a live event may re-render under the screenshot (the timeline
// redraws on a late `status` or `viewable_files`): taken again, not failed on a detached node.
const shotOf = async (locator, path) => {
  for (let i = 0; ; i++) {
    try { return await locator.screenshot({ path, timeout: 15000 }); } catch (e) { if (i >= 4 || !/not attached|detached/i.test(String(e))) throw e; }
    await new Promise((r) => setTimeout(r, 200));
  }
};
const waitLoaded = (page, sel, n = 1) => page.waitForFunction(
  ([s, k]) => { const imgs = [...document.querySelectorAll(s)]; return imgs.length >= k && imgs.every((i) => i.complete && i.naturalWidth > 0); },
  [sel, n], LONG);
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on("console", (m) => { if (m.type() === "error") out.consoleErrors.push(m.text()); });
  await page.goto(`${base}/?token=${encodeURIComponent(token)}`);
  await page.click(`#sessions li[data-sid="${sid}"] button`);

  // Thumbnails: the attachment on the user message, the image `read` returned under its call.
  await waitLoaded(page, "#timeline .bubble.user .thumbs img");
  await waitLoaded(page, "#timeline .item.tool-images .thumbs img");
  out.userThumbs = await page.$$eval("#timeline .bubble.user .thumbs img", (imgs) => imgs.map((i) => ({
    alt: i.alt, naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight, shownWidth: i.width, src: i.src.slice(0, 5) })));
  out.toolThumbs = await page.$$eval("#timeline .item.tool-images .thumbs img", (imgs) => imgs.map((i) => ({ alt: i.alt, naturalWidth: i.naturalWidth })));
  out.toolImagesText = await page.textContent("#timeline .item.tool-images");
  await shotOf(page.locator("#timeline .bubble.user .thumbs").first(), `${shots}/thumbnail.png`);
  await page.screenshot({ path: `${shots}/inspector-images.png` });

  // Enlarged: a click opens it at full size; Escape closes it; so does a click.
  await page.click("#timeline .bubble.user button.thumb");
  await page.waitForFunction(() => { const i = document.querySelector("#lightbox img"); return !document.getElementById("lightbox").hidden && i.complete && i.naturalWidth > 0; }, null, LONG);
  out.lightbox = await page.evaluate(() => { const i = document.querySelector("#lightbox img"); const r = i.getBoundingClientRect();
    return { naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight, shownWidth: r.width, caption: document.querySelector("#lightbox figcaption").textContent,
      focused: document.activeElement && document.activeElement.className }; });
  out.thumbShownWidth = await page.$eval("#timeline .bubble.user .thumbs img", (i) => i.getBoundingClientRect().width);
  await page.screenshot({ path: `${shots}/lightbox.png` });
  await page.keyboard.press("Escape");
  out.hiddenAfterEscape = await page.$eval("#lightbox", (b) => b.hidden);
  out.focusAfterEscape = await page.evaluate(() => document.activeElement && document.activeElement.className);
  await page.click("#timeline .item.tool-images button.thumb");
  await page.waitForFunction(() => !document.getElementById("lightbox").hidden, null, LONG);
  await page.mouse.click(20, 20);
  out.hiddenAfterClick = await page.$eval("#lightbox", (b) => b.hidden);

  // Attach: two files from the picker (an image and the file with a hostile name)...
  await page.click("#attach");
  await page.waitForSelector("#attach-picker button.pick", LONG);
  out.pickerFiles = await page.$$eval("#attach-picker button.pick", (bs) => bs.map((b) => b.textContent));
  await page.evaluate((names) => { for (const n of names) [...document.querySelectorAll("#attach-picker button.pick")].find((b) => b.dataset.path === n).click(); },
    ["renders/chart.png", hostile]);
  out.pickerPressed = await page.$$eval("#attach-picker button.pick[aria-pressed=true]", (bs) => bs.map((b) => b.dataset.path));
  await page.click("#attach-picker .picker-done");
  // ...one dragged from the workspace list onto the message box...
  await page.dragAndDrop('#files li.file[data-path="photo.png"]', "#message");
  // ...and one dropped from the computer: uploaded into the workspace, then attached.
  const dropped = await page.evaluateHandle(async () => {
    const canvas = new OffscreenCanvas(50, 40);
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#2a9d4b"; ctx.fillRect(0, 0, 50, 40);
    const blob = await canvas.convertToBlob({ type: "image/png" });
    const dt = new DataTransfer();
    dt.items.add(new File([blob], "dropped.png", { type: "image/png" }));
    return dt;
  });
  await page.dispatchEvent("#composer", "dragover", { dataTransfer: dropped });
  await page.dispatchEvent("#composer", "drop", { dataTransfer: dropped });
  await page.waitForFunction(() => document.querySelectorAll("#attached li.chip").length === 4, null, LONG);
  out.chips = await page.$$eval("#attached li.chip .attached-path", (ss) => ss.map((s) => s.textContent));
  out.messageAfterDrag = await page.inputValue("#message"); // the drop attached the path: no text was inserted
  await page.screenshot({ path: `${shots}/attachments.png` });

  await page.fill("#message", 'script:[{"tool_calls": [{"name": "message_user", "arguments": {"message": "got the attachments", "blockOnUser": true}}]}]');
  await page.click("#send");
  await page.waitForFunction(() => document.querySelectorAll("#timeline .bubble.user").length >= 2, null, LONG);
  await waitLoaded(page, "#timeline .bubble.user:last-of-type .thumbs img, #timeline .bubble.user .thumbs img", 4);
  await page.locator(".bubble.message_user.blocking", { hasText: "got the attachments" }).waitFor(LONG);
  out.chipsAfterSend = await page.locator("#attached li.chip").count();
  out.lastUserThumbs = await page.evaluate(() => {
    const bubbles = [...document.querySelectorAll("#timeline .bubble.user")];
    return [...bubbles[bubbles.length - 1].querySelectorAll(".thumbs img")].map((i) => ({ alt: i.alt, naturalWidth: i.naturalWidth }));
  });
  out.hostileAsText = await page.evaluate((n) => [...document.querySelectorAll("*")].some((e) => e.childNodes.length === 1 && e.textContent === n), hostile);
  out.pwned = await page.evaluate(() => window.pwned === 1 || document.querySelector('img[src="x"]') !== null);
  out.allLoaded = await page.evaluate(loaded("#timeline .thumbs img"));
} catch (err) {
  out.error = String(err && err.stack || err);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
