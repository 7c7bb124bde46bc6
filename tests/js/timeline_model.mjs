// The inspector's timeline items (services/proxy/static/js/timeline_model.js, pure data) for what
// tests/unit/test_inspector_stream_items.py gives on stdin: { entries, live }. Prints the items as JSON.
import { buildItems } from "../../services/proxy/static/js/timeline_model.js";

let raw = "";
for await (const chunk of process.stdin) raw += chunk;
const { entries, live } = JSON.parse(raw);
const items = buildItems(entries, { toolEnds: new Map(), extras: [], running: false, ...live,
  toolProgress: new Map(Object.entries(live.toolProgress || {})) });
process.stdout.write(JSON.stringify(items.map(({ ts, ...rest }) => rest)));
