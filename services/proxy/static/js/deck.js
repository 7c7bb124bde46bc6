// A Gamma deck (GET /sessions/{sid}/documents/{doc}) as cards: order, title, blocks, theme.
import { el } from "./dom.js";

const themeId = (theme) => (typeof theme === "string" ? theme : (theme && theme.id) || "default");

function block(b) {
  switch (b.type) {
    case "heading": return el("h5", {}, b.text || "");
    case "bullets": return el(b.ordered ? "ol" : "ul", {}, ...(b.items || []).map((i) => el("li", {}, String(i))));
    case "stat": return el("div", { class: "stat" }, el("span", { class: "stat-value" }, b.value || ""), el("span", {}, b.label || ""));
    case "quote": return el("blockquote", {}, b.text || "", b.attribution ? el("footer", {}, `— ${b.attribution}`) : null);
    case "callout": return el("p", { class: `callout ${b.tone || "info"}` }, b.text || "");
    case "image": return el("p", { class: "image-ph" }, `🖼 ${b.alt || b.asset || b.src || "image"}`);
    case "table": return el("table", {}, el("tr", {}, ...(b.columns || []).map((c) => el("th", {}, String(c)))),
      ...(b.rows || []).map((r) => el("tr", {}, ...r.map((c) => el("td", {}, String(c))))));
    case "timeline": return el("ol", { class: "timeline-block" }, ...(b.items || []).map((i) => el("li", {}, el("strong", {}, i.label || ""), " ", i.text || "")));
    case "chart": return el("p", { class: "muted" }, `${b.kind || "chart"}: ${(b.categories || []).join(", ")}`);
    case "cta": return el("p", { class: "cta" }, b.label || "");
    default: return el("p", {}, b.text || "");
  }
}

function card(c, n) {
  const blocks = Array.isArray(c.blocks) ? c.blocks.map(block) : [];
  const body = c.body || c.content;
  if (typeof body === "string" && body) blocks.unshift(el("p", {}, body));
  return el("li", { class: `deck-card layout-${c.layout || "content"}`, dataset: { card: c.id } },
    el("div", { class: "card-meta" }, el("span", { class: "card-order" }, `${n + 1}`), el("code", {}, c.id), c.layout ? el("span", {}, c.layout) : null),
    el("h3", { class: "card-title" }, c.title || "(untitled)"), ...blocks);
}

export function renderDecks(box, decks) {
  if (!decks.length) { box.replaceChildren(el("p", { class: "empty" }, "No deck yet.")); return; }
  box.replaceChildren(...decks.map(({ doc, deck, error }) => error
    ? el("p", { class: "error-text" }, `${doc}: ${error}`)
    : el("section", { class: `deck theme-${themeId(deck.theme)}`, "aria-label": `deck ${deck.title || doc}` },
      el("div", { class: "deck-head" }, el("strong", {}, deck.title || doc), el("span", { class: "muted small" },
        `${doc} · theme ${themeId(deck.theme)} · ${deck.cards.length} cards · revision ${deck.revision}`)),
      el("ol", { class: "deck-cards" }, ...deck.cards.map(card)))));
}
