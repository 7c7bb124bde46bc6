// The state beside the run: todo, active skills, panes and tabs, the open form.
import { el } from "./dom.js";

export function renderTodo(box, todo) {
  const items = (todo && todo.items) || [];
  if (!items.length) { box.replaceChildren(el("p", { class: "empty" }, "No tasks.")); return; }
  const done = items.filter((i) => i.status === "complete").length;
  const bar = el("div", { class: "todo-progress", role: "progressbar", "aria-label": "tasks complete",
    "aria-valuemin": "0", "aria-valuemax": String(items.length), "aria-valuenow": String(done) },
  el("div", { class: "todo-progress-fill", style: `width:${(100 * done) / items.length}%` }));
  const list = el("ol", { class: "tasks" }, ...items.map((i) => el("li", { dataset: { status: i.status } },
    el("span", { class: "task-mark", "aria-hidden": "true" }, { complete: "✓", in_progress: "▶", blocked: "!", pending: "○" }[i.status] || "○"),
    el("span", { class: "task-text" }, i.content), el("span", { class: "task-status" }, i.status.replace("_", " ")))));
  box.replaceChildren(el("div", { class: "muted small" }, `${done} of ${items.length} done · revision ${todo.revision ?? "–"}`), bar, list);
}

export function renderSkills(box, skills) {
  if (!skills.length) { box.replaceChildren(el("p", { class: "empty" }, "No skill active.")); return; }
  box.replaceChildren(el("ul", { class: "chips" }, ...skills.map((s) => el("li", { class: `chip skill-${s.type}` },
    el("strong", {}, s.name), " ", el("span", { class: "chip-kind" }, s.type)))));
}

export function renderPanes(box, ui) {
  const panes = (ui && ui.panes) || [];
  if (!panes.length) { box.replaceChildren(el("p", { class: "empty" }, "No pane open.")); return; }
  box.replaceChildren(...panes.map((pane) => {
    const active = (ui.activeTabByPane || {})[pane.id];
    const tabs = (pane.tabIds || []).map((tid) => {
      const tab = (ui.tabs || {})[tid] || { ari: "?" };
      return el("li", { class: tid === active ? "tab active" : "tab", "aria-current": tid === active ? "true" : null },
        el("span", { class: "tab-title" }, tab.title || tid), el("code", {}, tab.ari));
    });
    return el("div", { class: "pane" }, el("div", { class: "pane-name" }, `pane “${pane.id}”`), el("ul", { class: "tabs" }, ...tabs));
  }));
}

function fieldInput(field, value, disabled) {
  const id = `form-field-${field.id}`;
  const label = el("label", { for: id }, field.label, field.required ? " *" : "");
  switch (field.kind) {
    case "boolean":
      return el("div", { class: "field check" }, el("input", { id, type: "checkbox", name: field.id, checked: Boolean(value), disabled }), label);
    case "number":
      return el("div", { class: "field" }, label, el("input", { id, type: "number", name: field.id, value: value ?? "", disabled }));
    case "choice":
      return el("div", { class: "field" }, label, el("select", { id, name: field.id, disabled },
        el("option", { value: "" }, "—"), ...field.options.map((o) => el("option", { value: o, selected: o === value }, o))));
    case "multi_choice":
      return el("fieldset", { class: "field" }, el("legend", {}, field.label),
        ...field.options.map((o, n) => el("label", { class: "check" }, el("input", { type: "checkbox", name: field.id, value: o,
          id: `${id}-${n}`, checked: Array.isArray(value) && value.includes(o), disabled }), o)));
    default:
      return el("div", { class: "field" }, label, el("input", { id, type: "text", name: field.id, value: value ?? "", disabled }));
  }
}

export function readAnswers(formNode, form) {
  const answers = {};
  for (const f of form.fields || []) {
    if (f.kind === "multi_choice") answers[f.id] = [...formNode.querySelectorAll(`input[name="${CSS.escape(f.id)}"]:checked`)].map((i) => i.value);
    else if (f.kind === "boolean") answers[f.id] = formNode.elements[f.id].checked;
    else if (f.kind === "number") answers[f.id] = formNode.elements[f.id].value === "" ? null : Number(formNode.elements[f.id].value);
    else answers[f.id] = formNode.elements[f.id].value;
  }
  return answers;
}

/** `onAnswer(status, answers)` writes the answer (inspector.js). */
export function renderForm(box, form, onAnswer) {
  if (!form) { box.replaceChildren(el("p", { class: "empty" }, "No form open.")); return; }
  const open = form.status === "open";
  const node = el("form", { class: "agent-form", "aria-label": `form ${form.title}` },
    el("div", { class: "form-head" }, el("strong", {}, form.title), el("span", { class: `tag form-${form.status}` }, form.status)),
    ...(form.fields || []).map((f) => fieldInput(f, (form.answers || {})[f.id], !open)),
    open ? el("div", { class: "row" }, el("button", { type: "submit", class: "primary" }, "Submit answers"),
      el("button", { type: "button", onclick: () => onAnswer("dismissed", {}) }, "Dismiss")) : null);
  node.addEventListener("submit", (ev) => { ev.preventDefault(); onAnswer("submitted", readAnswers(node, form)); });
  box.replaceChildren(node);
}
