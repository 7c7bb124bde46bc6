// Checklist progress (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools"): the active workflow's step n of m, each step done / pending /
// skipped, from the runtime's `checklist` events, and the completion audits (`audit` events). The
// pane adds itself after the Tasks section; the inspector only forwards events and session changes.
import { el } from "./dom.js";

const MARK = { done: "✓", pending: "○", skipped: "⤼" };

export class ChecklistPane {
  constructor(after) {
    this.box = el("div", { id: "checklist" });
    this.section = el("section", { "aria-labelledby": "h-checklist" },
      el("h2", { id: "h-checklist" }, "Workflow checklist"), this.box);
    after.insertAdjacentElement("afterend", this.section);
    this.reset();
  }

  reset() {
    this.workflows = new Map(); // workflow -> latest checklist event data
    this.audits = new Map(); // workflow -> latest audit outcome, with the declared deviations
    this.ended = new Set(); // workflows whose contract ended (docs/architecture.md "Skill contracts")
    this.render();
  }

  onEvent(ev) {
    const d = ev.data || {};
    if (ev.type === "checklist") { this.workflows.set(d.workflow, d); this.ended.delete(d.workflow); }
    else if (ev.type === "audit") this.audits.set(d.workflow, d);
    else if (ev.type === "skill_ended" && this.workflows.has(d.name)) this.ended.add(d.name);
    else return;
    this.render();
  }

  render() {
    if (!this.workflows.size) { this.box.replaceChildren(el("p", { class: "empty" }, "No workflow checklist.")); return; }
    this.box.replaceChildren(...[...this.workflows.values()].map((w) => this.workflow(w)));
  }

  workflow(w) {
    const step = Math.min(w.current, w.total);
    const finished = w.current > w.total;
    const audit = this.audits.get(w.workflow);
    // the declared deviations (message_user's `deviations`), shown beside their steps
    const causes = new Map(((audit && audit.deviations) || []).map((d) => [d.step, d.cause]));
    return el("div", { class: "checklist", dataset: this.ended.has(w.workflow) ? { workflow: w.workflow, ended: "true" } : { workflow: w.workflow } },
      el("div", { class: "checklist-head" }, el("strong", {}, w.workflow), " ",
        el("span", { class: "checklist-position" }, finished ? `all ${w.total} steps reviewed` : `step ${step} of ${w.total}`),
        el("span", { class: "muted small" }, ` · ${w.done} done`),
        audit ? el("span", { class: `chip audit-${audit.outcome}` }, `audit: ${audit.outcome.replace("_", " ")}`) : null,
        this.ended.has(w.workflow) ? el("span", { class: "chip muted" }, "contract ended") : null),
      el("ol", { class: "checklist-steps" }, ...w.steps.map((s, i) => el("li", {
        dataset: { status: s.status, kind: s.kind, step: s.id }, class: i + 1 === w.current ? "current" : null,
        "aria-current": i + 1 === w.current ? "step" : null },
      el("span", { class: "task-mark", "aria-hidden": "true" }, MARK[s.status] || "○"),
      el("span", { class: "task-text" }, s.title), el("span", { class: "task-status" }, s.kind === "optional" ? `${s.status}, optional` : s.status),
      causes.has(s.id) ? el("span", { class: "deviation" }, `deviation: ${causes.get(s.id)}`) : null))));
  }
}
