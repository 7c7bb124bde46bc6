// The next message's attachments: workspace paths sent as `attachments` of POST /messages
// (docs/architecture.md "Images"). A path is added from the picker (the workspace's files, listed
// through GET …/workspace/files/{dir}/), by dragging a file of the workspace list onto the composer, or
// by dropping files from the computer there: those are uploaded into the workspace first (PUT), then
// attached. File names are the user's text: they only ever go into text nodes and attributes.
import { el } from "./dom.js";
import { api, filePath, sessionPath } from "./api.js";

export const PATH_TYPE = "application/x-gamma-workspace-path";
const MAX_ATTACHED = 100; // the API's own bound per message (its GAMMA_ATTACHMENTS_MAX is lower: it answers 422)
const MAX_LISTED = 1000;
const MAX_DEPTH = 8;

/** Every file path of the workspace, depth first, at most MAX_LISTED (and MAX_DEPTH levels). */
export async function workspaceFiles(sid) {
  const out = [];
  async function walk(dir, depth) {
    const body = await api(dir ? filePath(sid, dir) + "/" : sessionPath(sid, "/workspace/files/"));
    for (const entry of body.entries || []) {
      if (out.length >= MAX_LISTED) return;
      const path = dir ? `${dir}/${entry.name}` : entry.name;
      if (entry.type === "directory") { if (depth < MAX_DEPTH) await walk(path, depth + 1); }
      else out.push({ path, size: entry.size });
    }
  }
  await walk("", 0);
  return out;
}

export class Attachments {
  /** `files`: the FilesView (its `upload` puts dropped files into the workspace); `say(text, isError)`. */
  constructor({ chips, picker, pickerButton, zone, files, getSid, say }) {
    this.chips = chips; this.picker = picker; this.pickerButton = pickerButton; this.zone = zone;
    this.files = files; this.getSid = getSid; this.say = say; this.list = [];
    pickerButton.addEventListener("click", () => (this.picker.hidden ? this.openPicker() : this.closePicker()));
    picker.addEventListener("keydown", (ev) => { if (ev.key === "Escape") { ev.stopPropagation(); this.closePicker(); } });
    this.bindDrop();
  }

  get paths() { return [...this.list]; }

  add(path) {
    if (typeof path !== "string" || !path || this.list.includes(path)) return;
    if (this.list.length >= MAX_ATTACHED) { this.say(`at most ${MAX_ATTACHED} attachments per message`, true); return; }
    this.list.push(path);
    this.render();
  }

  remove(path) { this.list = this.list.filter((p) => p !== path); this.render(); }

  clear() { this.list = []; this.render(); this.closePicker(); }

  render() {
    this.chips.replaceChildren(...this.list.map((path) => el("li", { class: "chip attached", dataset: { path } },
      el("span", { class: "attached-path" }, path),
      el("button", { type: "button", class: "link", "aria-label": `remove attachment ${path}`, onclick: () => this.remove(path) }, "✕"))));
    this.chips.hidden = !this.list.length;
    for (const b of this.picker.querySelectorAll("button[data-path]")) b.setAttribute("aria-pressed", String(this.list.includes(b.dataset.path)));
  }

  async openPicker() {
    const sid = this.getSid();
    if (!sid) return;
    const list = el("ul", { class: "picker-files" }, el("li", { class: "muted small" }, "listing the workspace…"));
    this.picker.replaceChildren(el("h3", { id: "picker-title" }, "Attach workspace files"), list,
      el("button", { type: "button", class: "picker-done", onclick: () => this.closePicker() }, "Done"));
    this.picker.hidden = false;
    this.pickerButton.setAttribute("aria-expanded", "true");
    try {
      const found = await workspaceFiles(sid);
      if (sid !== this.getSid()) return;
      list.replaceChildren(...(found.length ? found.map(({ path }) => el("li", {},
        el("button", { type: "button", class: "link pick", dataset: { path }, "aria-pressed": String(this.list.includes(path)),
          onclick: () => (this.list.includes(path) ? this.remove(path) : this.add(path)) }, path)))
        : [el("li", { class: "empty" }, "The workspace is empty: upload a file first.")]));
      const first = list.querySelector("button");
      if (first) first.focus();
    } catch (err) { list.replaceChildren(el("li", { class: "error-text" }, `listing failed: ${err.message}`)); }
  }

  closePicker() {
    if (this.picker.hidden) return;
    this.picker.hidden = true;
    this.pickerButton.setAttribute("aria-expanded", "false");
  }

  /** A workspace file dragged from the list is attached; files from the computer are uploaded, then attached. */
  bindDrop() {
    const wanted = (ev) => ev.dataTransfer && [...ev.dataTransfer.types].some((t) => t === PATH_TYPE || t === "Files");
    const over = (on) => this.zone.classList.toggle("drop-over", on);
    this.zone.addEventListener("dragover", (ev) => {
      if (!wanted(ev) || !this.getSid()) return;
      ev.preventDefault(); ev.dataTransfer.dropEffect = "copy"; over(true);
    });
    this.zone.addEventListener("dragleave", () => over(false));
    this.zone.addEventListener("drop", async (ev) => {
      if (!wanted(ev) || !this.getSid()) return;
      ev.preventDefault(); over(false);
      const path = ev.dataTransfer.getData(PATH_TYPE);
      if (path) { this.add(path); return; }
      const dropped = [...ev.dataTransfer.files];
      if (!dropped.length) return;
      this.say(`uploading ${dropped.length} file${dropped.length > 1 ? "s" : ""} to attach…`, false);
      const stored = await this.files.upload(dropped);
      for (const uploaded of stored) this.add(uploaded);
      this.say(stored.length ? `uploaded and attached ${stored.join(", ")}` : "the upload was refused (see the workspace files)", !stored.length);
    });
  }
}
