// Validates Prometheus Operator custom resources (ServiceMonitor, PodMonitor,
// PrometheusRule) against the CRDs' OpenAPI schemas, which kubernetes-validate does not
// ship: npm @kubernetes-models/prometheus-operator carries them, generated from the
// operator's CRDs, and validates with ajv (types, patterns such as durations, required
// fields, enums). Like the API server's structural schemas, unknown fields are not errors.
//   node scripts/check-crds.mjs < docs.json     (a JSON array of manifests; see
//                                               scripts/check-packaging.sh)
// Exits 1 naming each invalid document; a document of the monitoring.coreos.com group of
// another kind is an error too (nothing here validates it).
import { readFileSync } from "node:fs";
import { PodMonitor, PrometheusRule, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const KINDS = { PodMonitor, PrometheusRule, ServiceMonitor };
const docs = JSON.parse(readFileSync(0, "utf8"));
let failed = 0;
let checked = 0;
for (const { file, doc } of docs) {
  if (!doc || !String(doc.apiVersion).startsWith("monitoring.coreos.com/")) continue;
  const Model = doc.apiVersion === "monitoring.coreos.com/v1" ? KINDS[doc.kind] : undefined;
  if (!Model) {
    console.error(`${file}: ${doc.apiVersion} ${doc.kind}: no schema here`);
    failed++;
    continue;
  }
  try {
    new Model(doc).validate();
    checked++;
  } catch (e) {
    console.error(`${file}: ${doc.kind} ${doc.metadata?.name}: ${e.message}`);
    failed++;
  }
}
if (failed > 0 || checked === 0) {
  if (checked === 0 && failed === 0) console.error("no Prometheus Operator resource found");
  process.exit(1);
}
console.log(`${checked} Prometheus Operator resource(s) valid`);
