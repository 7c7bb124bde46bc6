// Images of the conversation (docs/architecture.md "Images"): thumbnails of a user message's
// attachments and of a tool's image results, and one enlarged in an overlay (Escape or a click closes).
// The bytes come from GET /sessions/{sid}/images/{sha256} with the bearer token: an <img src> cannot
// send the Authorization header, so each image is fetched once and shown from a blob URL.
import { el } from "./dom.js";
import { request, sessionPath } from "./api.js";

const SHA256 = /^[0-9a-f]{64}$/;
const THUMB = { width: 160, height: 110 };

/** The size of a thumbnail of a `width` x `height` image: within THUMB, aspect ratio kept. */
export function thumbSize(width, height) {
  const scale = Math.min(1, THUMB.width / Math.max(1, width), THUMB.height / Math.max(1, height));
  return { width: Math.max(1, Math.round(width * scale)), height: Math.max(1, Math.round(height * scale)) };
}

export class Gallery {
  /** `box`: the overlay (#lightbox), `getSid`: the session shown. */
  constructor(box, getSid) {
    this.box = box; this.getSid = getSid;
    this.sid = null; this.pending = new Map(); this.ready = new Map(); this.opener = null;
    this.big = box.querySelector("img");
    this.caption = box.querySelector("figcaption");
    box.addEventListener("click", () => this.close());
    document.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape" && !this.box.hidden) { ev.preventDefault(); this.close(); }
    });
  }

  /** The image's blob URL (a promise; one fetch per image and session). */
  url(sha) {
    const sid = this.getSid();
    if (sid !== this.sid) this.reset(sid);
    let p = this.pending.get(sha);
    if (!p) {
      p = request(sessionPath(sid, `/images/${sha}`)).then((res) => res.blob()).then((blob) => {
        const u = URL.createObjectURL(blob);
        if (this.sid === sid) this.ready.set(sha, u); else URL.revokeObjectURL(u);
        return u;
      });
      p.catch(() => this.pending.delete(sha)); // a later render tries again
      this.pending.set(sha, p);
    }
    return p;
  }

  reset(sid) {
    for (const u of this.ready.values()) URL.revokeObjectURL(u);
    this.pending = new Map(); this.ready = new Map(); this.sid = sid;
  }

  /** Thumbnails of image references (ImageRef: sha256, mimeType, width, height, path), or null. */
  thumbs(refs) {
    const valid = (refs || []).filter((r) => r && typeof r.sha256 === "string" && SHA256.test(r.sha256));
    if (!valid.length) return null;
    return el("div", { class: "thumbs" }, ...valid.map((r) => this.thumb(r)));
  }

  thumb(ref) {
    const name = typeof ref.path === "string" && ref.path ? ref.path : ref.sha256.slice(0, 12);
    const size = thumbSize(ref.width, ref.height);
    const img = el("img", { class: "thumb-img", alt: name, width: size.width, height: size.height, dataset: { sha: ref.sha256 } });
    const shown = this.getSid() === this.sid && this.ready.get(ref.sha256);
    if (shown) img.src = shown; // already fetched: set at once, so a re-render does not flicker
    else this.url(ref.sha256).then((u) => { img.src = u; }, () => img.classList.add("broken"));
    const button = el("button", { type: "button", class: "thumb", title: `${name} (${ref.width}×${ref.height}): click to enlarge`,
      "aria-label": `enlarge image ${name}`, onclick: () => this.open(ref, name, button) }, img);
    return button;
  }

  async open(ref, name, opener) {
    this.opener = opener;
    this.caption.textContent = `${name} (${ref.width}×${ref.height})`;
    this.big.alt = name;
    this.big.removeAttribute("src");
    this.box.hidden = false;
    this.box.querySelector("button").focus();
    try { this.big.src = await this.url(ref.sha256); } catch (err) { this.caption.textContent = `${name}: ${err.message}`; }
  }

  close() {
    if (this.box.hidden) return;
    this.box.hidden = true;
    this.big.removeAttribute("src");
    if (this.opener && this.opener.isConnected) this.opener.focus();
    this.opener = null;
  }
}
