// Validate KEDA objects with @kubernetes-models/keda, whose validators are generated from KEDA's published
// CRD schemas (types, required fields, patterns). Usage: node keda_validate.mjs FILE (a JSON list of
// objects) -> prints one JSON line {errors: [{index, kind, message}]}; exit 1 on any error.
import { readFileSync } from 'node:fs';
import * as keda from '@kubernetes-models/keda/keda.sh/v1alpha1';

const docs = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const errors = [];
docs.forEach((doc, index) => {
  const Model = keda[doc.kind];
  if (doc.apiVersion !== 'keda.sh/v1alpha1' || typeof Model !== 'function') {
    errors.push({ index, kind: doc.kind, message: `not a KEDA v1alpha1 kind: ${doc.apiVersion} ${doc.kind}` });
    return;
  }
  try {
    new Model(doc).validate();
  } catch (err) {
    errors.push({ index, kind: doc.kind, message: String(err.message) });
  }
});
console.log(JSON.stringify({ checked: docs.length, errors }));
process.exit(errors.length === 0 ? 0 : 1);
