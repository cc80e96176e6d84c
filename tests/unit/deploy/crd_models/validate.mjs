// Validates the custom resources of Engram's manifests against the models the npm
// kubernetes-models packages generate from each operator's CRDs (ajv validators).
// stdin: a JSON list of resources; stdout: a JSON object {checked, errors, unknown}.
import { readFileSync } from "node:fs";

const MODELS = {
  "kafka.strimzi.io/v1beta2/KafkaTopic": "@kubernetes-models/strimzi-kafka-operator/kafka.strimzi.io/v1beta2/KafkaTopic",
  "keda.sh/v1alpha1/ScaledObject": "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject",
  "keda.sh/v1alpha1/TriggerAuthentication": "@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication",
  "monitoring.coreos.com/v1/ServiceMonitor": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor",
};

const resources = JSON.parse(readFileSync(0, "utf8"));
const result = { checked: [], errors: [], unknown: [] };
for (const resource of resources) {
  const key = `${resource.apiVersion}/${resource.kind}`;
  const label = `${key} ${resource.metadata?.name}`;
  const module = MODELS[key];
  if (!module) {
    result.unknown.push(label);
    continue;
  }
  const model = Object.values(await import(module))[0];
  try {
    new model(resource).validate();
    result.checked.push(label);
  } catch (error) {
    result.errors.push(`${label}: ${error.message}`);
  }
}
process.stdout.write(JSON.stringify(result));
