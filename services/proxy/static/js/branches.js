// Branch points of the transcript tree (GET /transcript?tree=1) and switching between branches: a
// switch is a rewind to the other branch's leaf (POST /rewind). Pure data helpers, then the loader.
import { api, sessionPath } from "./api.js";

const textOf = (content) => typeof content === "string" ? content
  : Array.isArray(content) ? content.filter((p) => p && p.type === "text").map((p) => p.text).join("") : "";

/** For each branch point on the active branch: its children, each with the newest entry of its
 *  subtree (the leaf a switch rewinds to) and a label (the first user text in it). */
export function branchChoices(treeEntries, branchPoints, activeIds) {
  const parent = new Map();
  for (const e of treeEntries) if (e.type !== "leaf") parent.set(e.id, e.parentId || null);
  const underChild = (id, child) => { // is `id` in the subtree of `child`? (iterative, bounded)
    for (let node = id, steps = 0; node && steps <= parent.size; node = parent.get(node), steps++) {
      if (node === child) return true;
    }
    return false;
  };
  const out = new Map();
  for (const [point, children] of Object.entries(branchPoints || {})) {
    if (!activeIds.has(point)) continue;
    out.set(point, children.map((child) => {
      const inside = treeEntries.filter((e) => e.type !== "leaf" && underChild(e.id, child));
      const user = inside.find((e) => e.type === "message" && e.message.role === "user");
      const label = user ? textOf(user.message.content) : (inside[0] && inside[0].type) || child;
      return { child, leaf: inside.length ? inside[inside.length - 1].id : child, active: activeIds.has(child),
               label: label.length > 100 ? label.slice(0, 100) + "…" : label };
    }));
  }
  return out;
}

/** Timeline items with a "branch" item before the first item of each branch point's active child. */
export function withBranchItems(items, choices) {
  const out = [...items];
  for (const [point, options] of choices) {
    const active = options.find((o) => o.active);
    let at = active ? out.findIndex((i) => i.key === active.child || String(i.key).startsWith(`${active.child}:`)) : -1;
    if (at < 0) at = out.length;
    out.splice(at, 0, { key: `branch:${point}`, ts: 0, kind: "branch", point, options });
  }
  return out;
}

/** The tree's branch points for the active entries: empty unless the session was ever rewound. */
export async function loadBranches(sid, activeIds) {
  const first = await api(sessionPath(sid, "/transcript?tree=1&limit=1"));
  if (!first.branch_points || !Object.keys(first.branch_points).length) return new Map();
  const entries = [];
  for (let cursor = "0", more = true; more;) {
    const page = await api(sessionPath(sid, `/transcript?tree=1&cursor=${cursor}`));
    entries.push(...page.entries);
    cursor = page.next_cursor;
    more = page.has_more;
  }
  return branchChoices(entries, first.branch_points, activeIds);
}

export const rewindTo = (sid, entryId) =>
  api(sessionPath(sid, "/rewind"), { method: "POST", json: { entry_id: entryId } });
