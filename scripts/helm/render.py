#!/usr/bin/env python3
"""Writes the generated files of the Helm chart (deploy/helm/gap-auditor), or with --check
says which of them are stale and fails:

  files/prometheusrule.yaml  a copy of deploy/kubernetes/prometheusrule.yaml (the chart
                             reads its spec with .Files.Get: a chart cannot reach files
                             outside its directory, and `helm package` needs them inside)
  files/gap-auditor.json     a copy of dashboards/gap-auditor.json
  values.schema.json         scripts/helm/chart-values.schema.json (the chart's own knobs)
                             with `config` = the output of `gap-auditor config schema`,
                             the auditor's keys, defaults and descriptions; secret keys
                             (writeOnly in that schema) are refused there: secrets come
                             from existing Secrets through `secretEnv`.

  scripts/helm/render.py [--check] [--bin PATH]
--bin names the gap-auditor binary (default: `cargo run --quiet -- config schema`).
Run it after changing the rule file, the dashboard or the config structs; CI
(scripts/helm-check.sh, tests/packaging.rs) runs --check. Python's standard library only.
"""

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/helm/gap-auditor"
COPIES = [
    ("deploy/kubernetes/prometheusrule.yaml", "files/prometheusrule.yaml"),
    ("dashboards/gap-auditor.json", "files/gap-auditor.json"),
]
CHART_SCHEMA = ROOT / "scripts/helm/chart-values.schema.json"
# librdkafka properties that hold a credential: refused in `config.kafka.properties` (a
# map of every property, so the schema cannot tell them by type). The chart's policy, not
# the config's: the auditor itself accepts them (from its environment, say).
SECRET_PROPERTIES = [
    "sasl.password", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config",
    "ssl.key.password", "ssl.key.pem", "ssl.keystore.password",
]
SECRET_NOTE = (
    "A secret: not in values (a ConfigMap is no place for it). Give it from an existing "
    "Secret through `secretEnv`, as the GAP_AUDITOR__... variable of this key."
)


def config_schema(binary):
    cmd = [binary, "config", "schema"] if binary else [
        "cargo", "run", "--quiet", "--bin", "gap-auditor", "--", "config", "schema"]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def is_secret(schema):
    """A property whose value (or, when optional, whose non-null branch) is writeOnly."""
    if not isinstance(schema, dict):
        return False
    return schema.get("writeOnly") is True or any(
        isinstance(b, dict) and b.get("writeOnly") is True for b in schema.get("anyOf", []))


def refuse_secrets(schema, where, refused):
    """Replaces every secret property of every object schema below `schema` by one that
    nothing passes. A free map of secrets (kafka.properties: SASL settings beside plain
    ones) is no property and stays: its secret entries go through secretEnv by docs."""
    if isinstance(schema, dict):
        for name, sub in list(schema.get("properties", {}).items()):
            if is_secret(sub):
                schema["properties"][name] = {
                    "not": {},
                    "description": f"{sub.get('description', '')} {SECRET_NOTE}".strip(),
                }
                refused.append(f"{where}.{name}")
        for key, sub in schema.items():
            if key != "properties":
                refuse_secrets(sub, where, refused)
        for name, sub in schema.get("properties", {}).items():
            refuse_secrets(sub, f"{where}.{name}", refused)
    elif isinstance(schema, list):
        for sub in schema:
            refuse_secrets(sub, where, refused)


def values_schema(binary):
    chart = json.loads(CHART_SCHEMA.read_text())
    chart.pop("$comment", None)
    config = copy.deepcopy(config_schema(binary))
    config.pop("$schema", None)
    defs = config.pop("$defs", {})
    clash = set(defs) & set(chart.get("$defs", {}))
    if clash:
        sys.exit(f"render.py: $defs names used by both schemas: {sorted(clash)}")
    refused = []
    refuse_secrets(config, "config", refused)
    for name, sub in defs.items():
        refuse_secrets(sub, name, refused)
    if not refused:
        sys.exit("render.py: no secret key found in the config schema (writeOnly): "
                 "has `gap-auditor config schema` changed?")
    properties = defs.get("KafkaConfig", {}).get("properties", {}).get("properties")
    if not isinstance(properties, dict):
        sys.exit("render.py: KafkaConfig.properties not found in the config schema")
    properties["propertyNames"] = {
        "not": {"enum": SECRET_PROPERTIES},
        "description": "Credentials (" + ", ".join(SECRET_PROPERTIES) + ") are refused here: "
                       + SECRET_NOTE,
    }
    config["description"] = (
        "gap-auditor.toml as YAML, rendered into the ConfigMap as TOML: the schema of "
        "`gap-auditor config schema`, secret keys refused.")
    chart["properties"]["config"] = config
    out = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": ("Generated by scripts/helm/render.py from "
                     "scripts/helm/chart-values.schema.json and `gap-auditor config schema`: "
                     "do not edit."),
        "title": "Values of the gap-auditor Helm chart",
    }
    out.update(chart)
    out["$defs"] = {**chart.get("$defs", {}), **defs}
    return json.dumps(out, indent=2, ensure_ascii=False) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; fail when stale")
    ap.add_argument("--bin", help="the gap-auditor binary (default: cargo run)")
    ap.add_argument("--chart", default=str(CHART), help="chart directory (tests: a copy)")
    args = ap.parse_args()
    chart = Path(args.chart)

    wanted = {dst: (ROOT / src).read_bytes() for src, dst in COPIES}
    wanted["values.schema.json"] = values_schema(args.bin).encode()
    stale = []
    for rel, content in wanted.items():
        path = chart / rel
        if path.exists() and path.read_bytes() == content:
            continue
        if args.check:
            stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if stale:
        for rel in stale:
            print(f"{chart / rel}: stale (its source changed)", file=sys.stderr)
        print("run scripts/helm/render.py and commit the result", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
