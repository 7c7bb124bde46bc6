// Validate an AsyncAPI document with the AsyncAPI project's own parser (@asyncapi/parser).
// Usage: node asyncapi_validate.mjs FILE -> prints one JSON line {errors, warnings, version}; exit 1 on errors.
import { Parser } from '@asyncapi/parser';
import { readFileSync } from 'node:fs';

const parser = new Parser();
const { document, diagnostics } = await parser.parse(readFileSync(process.argv[2], 'utf8'));
// Spectral severities: 0 error, 1 warning, 2 information, 3 hint.
const pick = (s) => diagnostics.filter((d) => d.severity === s).map((d) => ({ code: d.code, message: d.message, path: d.path }));
const errors = pick(0);
console.log(JSON.stringify({ parsed: Boolean(document), version: document?.version() ?? null, errors, warnings: pick(1) }));
process.exit(document && errors.length === 0 ? 0 : 1);
