#!/usr/bin/env python3
"""Checks of `helm template` output (scripts/helm-check.sh runs them; PyYAML from the
packaging venv, tomllib from Python 3.11+):

  compare.py kustomize DEPLOYMENT.yaml SIDECAR.yaml
      The chart's defaults render what deploy/kubernetes does: DEPLOYMENT.yaml (mode
      deployment, release name gap-auditor) against deployment.yaml, configmap.yaml,
      service.yaml, servicemonitor.yaml and prometheusrule.yaml; SIDECAR.yaml (mode
      flinkSidecar) against flink-sidecar.yaml, flink-sidecar-podmonitor.yaml and
      configmap.yaml. Field by field where behaviour lives: names, image, args, env
      (secretKeyRefs included), ports, probes, resources, security contexts, volumes and
      mounts, the store's claim, the config (as parsed TOML), Service ports, the monitors'
      endpoints and the rules. Labels may differ (Helm's standard ones are added), as long
      as every selector still selects what it did.
  compare.py roundtrip RENDERED.yaml VALUES.yaml
      The ConfigMap's TOML, read back with tomllib, is exactly VALUES.yaml's `config`: the
      chart's TOML writer (templates/_toml.tpl) loses and changes nothing.
  compare.py toml RENDERED.yaml
      Prints the ConfigMap's gap-auditor.toml (for `gap-auditor validate-config`).
Exit 1 with every difference listed.
"""

import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy/kubernetes"
AUDITOR = "gap-auditor"

problems = []
# What `same` calls its two sides.
SIDES = ["chart", "kustomize"]


def docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def one(resources, kind, what):
    found = [r for r in resources if r["kind"] == kind]
    if len(found) != 1:
        problems.append(f"{what}: {len(found)} {kind} resources, expected 1")
        return {}
    return found[0]


def same(path, chart, kustomize):
    """Records every difference between two parsed YAML values."""
    a, b = SIDES
    if isinstance(chart, dict) and isinstance(kustomize, dict):
        for k in sorted(set(chart) | set(kustomize)):
            if k not in chart:
                problems.append(f"{path}.{k}: missing from the {a} ({b}: {kustomize[k]!r})")
            elif k not in kustomize:
                problems.append(f"{path}.{k}: only in the {a} ({chart[k]!r})")
            else:
                same(f"{path}.{k}", chart[k], kustomize[k])
    elif isinstance(chart, list) and isinstance(kustomize, list):
        if len(chart) != len(kustomize):
            problems.append(f"{path}: {len(chart)} items in the {a}, {len(kustomize)} in the {b}:"
                            f"\n    {a}: {chart!r}\n    {b}: {kustomize!r}")
        else:
            for i, (x, y) in enumerate(zip(chart, kustomize)):
                same(f"{path}[{i}]", x, y)
    elif chart != kustomize or type(chart) is not type(kustomize):
        problems.append(f"{path}: {a} {chart!r} != {b} {kustomize!r}")


def by_name(items):
    return {i["name"]: i for i in items or []}


def config_toml(resources, what):
    cm = one(resources, "ConfigMap", what)
    text = cm.get("data", {}).get("gap-auditor.toml", "")
    return cm, text


def config_value(config, env_name):
    """The config value an override GAP_AUDITOR__A__0__B names, or None."""
    node = config
    for seg in env_name.removeprefix("GAP_AUDITOR__").split("__"):
        seg = seg.lower()
        if isinstance(node, list) and seg.isdigit() and int(seg) < len(node):
            node = node[int(seg)]
        elif isinstance(node, dict) and seg in node:
            node = node[seg]
        else:
            return None
    return node


def env_same(path, chart, kustomize, config):
    """Environment as NAME -> value or valueFrom. A kustomize variable the chart leaves out
    is allowed only when it restates the config's own value (the sidecar's
    GAP_AUDITOR__AUDITS__0__GRACE=2m beside grace = "2m" in the ConfigMap)."""
    c = {e["name"]: e for e in chart or []}
    k = {e["name"]: e for e in kustomize or []}
    for name in sorted(set(c) | set(k)):
        if name in c and name in k:
            same(f"{path}[{name}]", c[name], k[name])
        elif name in k:
            value = k[name].get("value")
            if value is None or str(config_value(config, name)) != value:
                problems.append(f"{path}[{name}]: missing from the chart, and the config does "
                                f"not hold its value {value!r}")
        else:
            problems.append(f"{path}[{name}]: only in the chart")


AUDITOR_FIELDS = ["image", "imagePullPolicy", "args", "ports", "livenessProbe", "readinessProbe",
                  "resources", "securityContext", "volumeMounts"]


def compare_pod(what, chart_dep, kust_dep, config):
    same(f"{what} metadata.name", chart_dep["metadata"]["name"], kust_dep["metadata"]["name"])
    for field in ["replicas", "strategy"]:
        same(f"{what} spec.{field}", chart_dep["spec"].get(field), kust_dep["spec"].get(field))
    ct, kt = chart_dep["spec"]["template"], kust_dep["spec"]["template"]
    for key, value in kt["metadata"].get("annotations", {}).items():
        same(f"{what} pod annotation {key}", ct["metadata"].get("annotations", {}).get(key), value)
    selector = chart_dep["spec"]["selector"]["matchLabels"]
    labels = ct["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in selector.items()):
        problems.append(f"{what}: the selector {selector} does not select the pod {labels}")
    cs, ks = ct["spec"], kt["spec"]
    for field in ["terminationGracePeriodSeconds", "securityContext"]:
        same(f"{what} pod spec.{field}", cs.get(field), ks.get(field))
    same(f"{what} volumes", by_name(cs.get("volumes")), by_name(ks.get("volumes")))
    cc, kc = by_name(cs["containers"]), by_name(ks["containers"])
    same(f"{what} container names", sorted(cc), sorted(kc))
    for name, kcon in kc.items():
        ccon = cc.get(name)
        if ccon is None:
            continue
        if name != AUDITOR:
            same(f"{what} container {name}", ccon, kcon)
            continue
        for field in AUDITOR_FIELDS:
            same(f"{what} container {name}.{field}", ccon.get(field), kcon.get(field))
        env_same(f"{what} container {name}.env", ccon.get("env"), kcon.get("env"), config)
        extra = set(ccon) - set(AUDITOR_FIELDS) - {"name", "env"}
        if extra:
            problems.append(f"{what} container {name}: fields only in the chart: {sorted(extra)}")


def compare_common(what, chart, kust, config_text):
    cm, text = config_toml(chart, what)
    kcm = one(kust, "ConfigMap", f"{what} (kustomize)")
    same(f"{what} ConfigMap name", cm.get("metadata", {}).get("name"), kcm["metadata"]["name"])
    same(f"{what} config (TOML)", tomllib.loads(text), tomllib.loads(config_text))
    pvc, kpvc = one(chart, "PersistentVolumeClaim", what), one(kust, "PersistentVolumeClaim", what)
    same(f"{what} PVC name", pvc.get("metadata", {}).get("name"), kpvc["metadata"]["name"])
    same(f"{what} PVC spec", pvc.get("spec"), kpvc["spec"])


def service_selects(what, svc, pod_labels):
    selector = svc.get("spec", {}).get("selector", {})
    if not selector or any(pod_labels.get(k) != v for k, v in selector.items()):
        problems.append(f"{what}: the Service selector {selector} does not select {pod_labels}")


def kustomize(deployment_render, sidecar_render):
    kust_cm_text = docs(K8S / "configmap.yaml")[0]["data"]["gap-auditor.toml"]
    config = tomllib.loads(kust_cm_text)

    # --- mode deployment ---
    what = "mode deployment"
    chart = docs(deployment_render)
    kust = []
    for f in ["configmap.yaml", "deployment.yaml", "service.yaml", "servicemonitor.yaml",
              "prometheusrule.yaml"]:
        kust += docs(K8S / f)
    kinds = sorted(r["kind"] for r in chart)
    expected = sorted(r["kind"] for r in kust)
    same(f"{what}: kinds (the Secret is never the chart's)", kinds, expected)
    dep = one(chart, "Deployment", what)
    compare_pod(what, dep, one(kust, "Deployment", what), config)
    compare_common(what, chart, kust, kust_cm_text)
    svc, ksvc = one(chart, "Service", what), one(kust, "Service", what)
    same(f"{what} Service name", svc["metadata"]["name"], ksvc["metadata"]["name"])
    for field in ["ports", "publishNotReadyAddresses"]:
        same(f"{what} Service spec.{field}", svc["spec"].get(field), ksvc["spec"].get(field))
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    service_selects(what, svc, pod_labels)
    sm, ksm = one(chart, "ServiceMonitor", what), one(kust, "ServiceMonitor", what)
    for field in ["endpoints", "jobLabel"]:
        same(f"{what} ServiceMonitor spec.{field}", sm["spec"].get(field), ksm["spec"].get(field))
    sel = sm["spec"]["selector"]["matchLabels"]
    if any(svc["metadata"]["labels"].get(k) != v for k, v in sel.items()):
        problems.append(f"{what}: the ServiceMonitor selects {sel}, not the Service")
    # The job label (jobLabel names a Service label): what the alert rules expect.
    same(f"{what} ServiceMonitor job", svc["metadata"]["labels"].get(sm["spec"]["jobLabel"]),
         ksvc["metadata"]["labels"].get(ksm["spec"]["jobLabel"]))
    rule, krule = one(chart, "PrometheusRule", what), one(kust, "PrometheusRule", what)
    same(f"{what} PrometheusRule spec", rule.get("spec"), krule.get("spec"))

    # --- mode flinkSidecar ---
    what = "mode flinkSidecar"
    chart = docs(sidecar_render)
    kust = docs(K8S / "configmap.yaml") + docs(K8S / "flink-sidecar.yaml") + \
        docs(K8S / "flink-sidecar-podmonitor.yaml")
    # The rules are not part of the sidecar example but of every install.
    kinds = sorted(r["kind"] for r in chart if r["kind"] != "PrometheusRule")
    same(f"{what}: kinds", kinds, sorted(r["kind"] for r in kust))
    dep = one(chart, "Deployment", what)
    kdep = one(kust, "Deployment", what)
    compare_pod(what, dep, kdep, config)
    same(f"{what} Deployment selector", dep["spec"]["selector"], kdep["spec"]["selector"])
    compare_common(what, chart, kust, kust_cm_text)
    svc, ksvc = one(chart, "Service", what), one(kust, "Service", what)
    same(f"{what} Service name", svc["metadata"]["name"], ksvc["metadata"]["name"])
    same(f"{what} Service spec", svc["spec"], ksvc["spec"])
    pm, kpm = one(chart, "PodMonitor", what), one(kust, "PodMonitor", what)
    same(f"{what} PodMonitor name", pm["metadata"]["name"], kpm["metadata"]["name"])
    same(f"{what} PodMonitor spec", pm["spec"], kpm["spec"])


def without_nulls(v):
    """Helm drops a key whose value is null (it removes a default)."""
    if isinstance(v, dict):
        return {k: without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [without_nulls(x) for x in v]
    return v


def roundtrip(rendered, values_file):
    SIDES[:] = ["rendered TOML", "values file"]
    with open(values_file) as f:
        wanted = without_nulls(yaml.safe_load(f)["config"])
    _, text = config_toml(docs(rendered), "roundtrip")
    try:
        got = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        problems.append(f"the rendered TOML does not parse: {e}\n{text}")
        return
    same("config", got, wanted)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "kustomize":
        try:
            kustomize(*args)
        except (KeyError, TypeError, IndexError) as e:
            # A resource without the fields compared: named, not a traceback.
            problems.append(f"a rendered resource lacks a field the comparison needs: {e!r}")
    elif cmd == "roundtrip":
        roundtrip(*args)
    elif cmd == "toml":
        print(config_toml(docs(args[0]), "toml")[1], end="")
    else:
        sys.exit(__doc__)
    if problems:
        print(f"{len(problems)} difference(s):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
