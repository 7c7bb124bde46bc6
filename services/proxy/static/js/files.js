// Workspace files: the listing (GET …/workspace/files/{dir}/), download, upload by picker or drag and drop (PUT),
// delete (DELETE). Uploads and deletes work on a dormant session too (it stays dormant): the agent is
// told of them, before the next message, when it wakes.
import { el, fmtBytes } from "./dom.js";
import { api, request, filePath, sessionPath } from "./api.js";
import { PATH_TYPE } from "./attach.js";

export class FilesView {
  constructor(box, statusLine, getSid) {
    this.box = box; this.statusLine = statusLine; this.getSid = getSid; this.expanded = new Set([""]);
  }

  async refresh() {
    const sid = this.getSid();
    if (!sid) return;
    try {
      const tree = await this.listing(sid, "");
      if (sid === this.getSid()) this.box.replaceChildren(tree);
    } catch (err) { this.say(`listing failed: ${err.message}`, true); }
  }

  async listing(sid, dir) {
    const body = await api(dir ? filePath(sid, dir) + "/" : sessionPath(sid, "/workspace/files/"));
    const entries = body.entries || [];
    if (!entries.length && !dir) return el("p", { class: "empty" }, "The workspace is empty.");
    const list = el("ul", { class: "files" });
    for (const entry of entries) {
      const path = dir ? `${dir}/${entry.name}` : entry.name;
      if (entry.type === "directory") {
        const open = this.expanded.has(path);
        const item = el("li", { class: "dir" }, el("button", { type: "button", class: "link", "aria-expanded": String(open),
          onclick: () => { open ? this.expanded.delete(path) : this.expanded.add(path); this.refresh(); } }, `${open ? "▾" : "▸"} ${entry.name}/`));
        if (open) item.append(await this.listing(sid, path));
        list.append(item);
      } else {
        // Draggable onto the composer: attached to the next message (js/attach.js).
        list.append(el("li", { class: "file", dataset: { path }, draggable: "true", title: `${path}: drag onto the message box to attach`,
          ondragstart: (ev) => { ev.dataTransfer.setData(PATH_TYPE, path); ev.dataTransfer.setData("text/plain", path); ev.dataTransfer.effectAllowed = "copy"; } },
          el("button", { type: "button", class: "link", title: `download ${path}`, onclick: () => this.download(path) }, entry.name),
          el("span", { class: "muted small size" }, entry.size === undefined || entry.size === null ? "" : fmtBytes(entry.size)),
          el("button", { type: "button", class: "link delete", "aria-label": `delete ${path}`, title: `delete ${path}`,
            onclick: () => this.remove(path) }, "✕")));
      }
    }
    return list;
  }

  async download(path) {
    try {
      const res = await request(filePath(this.getSid(), path));
      const url = URL.createObjectURL(await res.blob());
      const a = el("a", { href: url, download: path.split("/").pop() });
      document.body.append(a); a.click(); a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (err) { this.say(`download of ${path} failed: ${err.message}`, true); }
  }

  /** Uploads each file; the workspace paths of those stored. */
  async upload(files, dir = "") {
    const stored = [];
    for (const file of files) {
      const path = dir ? `${dir}/${file.name}` : file.name;
      try {
        const body = await api(filePath(this.getSid(), path), { method: "PUT", body: file, headers: { "Content-Type": "application/octet-stream" } });
        this.say(`uploaded ${body.path} (${fmtBytes(body.size)}${body.created ? ", new" : ""})`, false);
        stored.push(body.path);
      } catch (err) {
        this.say(`upload of ${path} refused (${err.status || "network"}): ${err.message}`, true);
      }
    }
    await this.refresh();
    return stored;
  }

  async remove(path) {
    try {
      await api(filePath(this.getSid(), path), { method: "DELETE" });
      this.say(`deleted ${path}`, false);
    } catch (err) {
      this.say(`delete of ${path} refused (${err.status || "network"}): ${err.message}`, true);
    }
    await this.refresh();
  }

  say(text, isError) {
    this.statusLine.textContent = text;
    this.statusLine.className = isError ? "files-status error-text" : "files-status ok";
  }

  /** Drops anywhere on `zone` upload into the workspace root. */
  bindDrop(zone, picker) {
    const over = (on) => zone.classList.toggle("drop-over", on);
    zone.addEventListener("dragover", (ev) => { ev.preventDefault(); over(true); });
    zone.addEventListener("dragleave", () => over(false));
    zone.addEventListener("drop", (ev) => {
      ev.preventDefault(); over(false);
      if (ev.dataTransfer && ev.dataTransfer.files.length) this.upload([...ev.dataTransfer.files]);
    });
    picker.addEventListener("change", () => { this.upload([...picker.files]); picker.value = ""; });
  }
}
