#!/usr/bin/env bash
# Checks the Helm chart (deploy/helm/gap-auditor) with a real helm:
#   1. its generated files are current (scripts/helm/render.py --check): the copies of the
#      PrometheusRule and the dashboard, values.schema.json against
#      `gap-auditor config schema`;
#   2. `helm lint --strict` in both modes, which also validates the values against
#      values.schema.json;
#   3. `helm template` in both modes and with every toggle flipped, each rendering
#      validated: kubernetes-validate --strict (Kubernetes' schemas) and the Prometheus
#      Operator's resources against their CRDs' schemas (scripts/packaging-tools.sh);
#   4. the defaults against deploy/kubernetes, field by field (scripts/helm/compare.py
#      kustomize), and the config's TOML writer round-tripping awkward values
#      (compare.py roundtrip) that `gap-auditor validate-config` then accepts.
# Every check is first shown a broken input it must REJECT: a check that cannot fail
# proves nothing.
#
# helm is built from source with the Go toolchain (the Go module proxy), once, into
# $GAP_AUDITOR_CACHE/helm-$HELM_VERSION (default ~/.cache/gap-auditor, the cache CI keeps
# across runs): a few minutes the first time (module downloads and compile), nothing after.
# The Python and npm linters are check-packaging.sh's, from the same cache.
#   scripts/helm-check.sh      (scripts/test.sh runs it; builds the debug binary if it is
#                               not up to date)
#   scripts/helm-check.sh --prepare   only what it downloads and builds (helm, the linters'
#                               venv and npm packages), no check: .ci/run runs it beside the
#                               demo's cold build
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
# shellcheck source=scripts/lib.sh
. "$HERE/lib.sh"
cd "$ROOT"

CACHE=${GAP_AUDITOR_CACHE:-$HOME/.cache/gap-auditor}
CHART=deploy/helm/gap-auditor
# Pinned: a new helm release must not change what CI renders on its own. v3.21.4 builds
# with the k8s.io modules v0.36: the Kubernetes version `helm template` assumes (its
# release Makefile sets the same through -ldflags; `go install` alone would leave 1.20).
HELM_VERSION=v3.21.4
HELM_K8S_MINOR=36
HELM_DIR=$CACHE/helm-$HELM_VERSION
HELM=$HELM_DIR/helm

helm_current() {
  [[ -x $HELM ]] && [[ $("$HELM" version --template '{{.Version}}' 2>/dev/null) == "$HELM_VERSION" ]]
}
if ! helm_current; then
  # Go's default install location, in case CI's environment does not carry it on PATH.
  [[ -x /usr/local/go/bin/go ]] && export PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null || die "go is needed to build helm $HELM_VERSION (or put the binary at $HELM)"
  log "building helm $HELM_VERSION into $HELM_DIR (go install; the first time takes minutes)"
  pkg=helm.sh/helm/v3
  ldflags="-s -w -X $pkg/internal/version.version=$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean"
  for p in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X $pkg/$p.k8sVersionMajor=1 -X $pkg/$p.k8sVersionMinor=$HELM_K8S_MINOR"
  done
  # Into a fresh directory, moved in place whole: an interrupted build leaves no half
  # binary where the next run would trust it.
  mkdir -p "$CACHE"
  tmp=$(mktemp -d "$CACHE/helm-build.XXXXXX")
  (cd "$tmp" && CGO_ENABLED=0 GOBIN=$tmp GOFLAGS=-mod=mod \
    go install -trimpath -ldflags "$ldflags" "$pkg/cmd/helm@$HELM_VERSION")
  rm -rf "$HELM_DIR" && mkdir -p "$HELM_DIR" && mv "$tmp/helm" "$HELM" && rm -rf "$tmp"
  helm_current || die "the helm just built does not report $HELM_VERSION"
fi
# shellcheck source=scripts/packaging-tools.sh
. "$HERE/packaging-tools.sh"
ensure_packaging_venv
ensure_crd_models
[[ ${1:-} == --prepare ]] && exit 0

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PY=$VENV/bin/python3

# scripts/test.sh names the binary its build step made (GAP_AUDITOR_BUILT_BIN): a cargo
# build here, even a no-op one, waits for cargo's lock on the build directory, which the
# kerberos-oidc build running beside this holds for minutes on a cold cache. Alone: built
# here (CI builds into its own CARGO_TARGET_DIR; a no-op when the binary is up to date).
if [[ -n ${GAP_AUDITOR_BUILT_BIN:-} && -x ${GAP_AUDITOR_BUILT_BIN:-} ]]; then
  BIN=$GAP_AUDITOR_BUILT_BIN
else
  cargo build --quiet --bin gap-auditor
  BIN=$(realpath "${CARGO_TARGET_DIR:-$ROOT/target}")/debug/gap-auditor
fi

log "scripts/helm/render.py --check: the chart's copies and values.schema.json are current"
cp -r "$CHART" "$WORK/stale-chart"
printf '# drifted\n' >>"$WORK/stale-chart/files/prometheusrule.yaml"
must_reject "render.py --check (a drifted PrometheusRule copy)" \
  python3 scripts/helm/render.py --check --bin "$BIN" --chart "$WORK/stale-chart"
python3 scripts/helm/render.py --check --bin "$BIN" \
  || fail "the chart's generated files are stale: run scripts/helm/render.py"

log "helm lint --strict (both modes; values against values.schema.json)"
must_reject "helm lint (a misspelt config key)" \
  "$HELM" lint --strict "$CHART" --set config.kafka.brokrs=x
must_reject "helm lint (a secret in values)" \
  "$HELM" lint --strict "$CHART" --set-json 'config.audits=[{"name":"a","topics":["t"],"match":{"strategy":"offset_columns"},"sink":{"kind":"doris","url":"mysql://u@h:9030/d","table":"t","password":"x"}}]'
must_reject "helm lint (a SASL password in kafka.properties)" \
  "$HELM" lint --strict "$CHART" --set 'config.kafka.properties.sasl\.password=x'
for mode in deployment flinkSidecar; do
  "$HELM" lint --strict --quiet "$CHART" --set mode=$mode || fail "helm lint (mode $mode)"
done

log "helm template: both modes, every toggle flipped, awkward config values"
render() { local out=$1; shift; "$HELM" template gap-auditor "$CHART" --namespace auditing "$@" >"$out"; }
render "$WORK/deployment.yaml" || fail "helm template (mode deployment)"
render "$WORK/sidecar.yaml" --set mode=flinkSidecar || fail "helm template (mode flinkSidecar)"
render "$WORK/toggled.yaml" --set dashboard.enabled=true,persistence.enabled=false \
  --set serviceMonitor.enabled=false,prometheusRule.enabled=false,logJson=false \
  --set-json 'extraVolumes=[{"name":"ca","secret":{"secretName":"sink-ca"}}]' \
  --set-json 'extraVolumeMounts=[{"name":"ca","mountPath":"/etc/gap-auditor-ca","readOnly":true}]' \
  || fail "helm template (toggles flipped)"
render "$WORK/toggled-sidecar.yaml" --set mode=flinkSidecar,persistence.existingClaim=auditor-store \
  --set podMonitor.enabled=false,dashboard.enabled=true,flinkSidecar.service.enabled=false,scrapeAnnotations=false \
  || fail "helm template (flinkSidecar, toggles flipped)"
render "$WORK/awkward.yaml" -f scripts/helm/awkward-values.yaml || fail "helm template (awkward values)"
must_reject "helm template (state.path off the store volume)" \
  render "$WORK/bad.yaml" --set config.state.path=/tmp/state
grep -q 'kind: ConfigMap' "$WORK/toggled.yaml" && grep -q 'grafana_dashboard' "$WORK/toggled.yaml" \
  || fail "dashboard.enabled=true rendered no dashboard ConfigMap"
for f in deployment sidecar; do
  grep -q 'GapAuditorDataLoss' "$WORK/$f.yaml" || fail "$f: no PrometheusRule with the alerts"
done

log "kubernetes-validate --strict and the CRD schemas on every rendering"
sed 's/^          readinessProbe:$/          readynessProbe:/' "$WORK/deployment.yaml" >"$WORK/bad-deployment.yaml"
must_reject "kubernetes-validate (a misspelt field in a rendering)" \
  "$VENV/bin/kubernetes-validate" --strict --quiet "$WORK/bad-deployment.yaml"
sed 's/^      interval: 15s$/      interval: soon/' "$WORK/sidecar.yaml" >"$WORK/bad-sidecar.yaml"
must_reject "CRD schema check (a malformed PodMonitor interval in a rendering)" \
  check_crds "$WORK/bad-sidecar.yaml"
renders=("$WORK"/{deployment,sidecar,toggled,toggled-sidecar,awkward}.yaml)
"$VENV/bin/kubernetes-validate" --strict --quiet --no-warn "${renders[@]}" || fail "kubernetes-validate"
check_crds "${renders[@]}" || fail "Prometheus Operator resources"

log "the defaults against deploy/kubernetes (scripts/helm/compare.py kustomize)"
render "$WORK/drifted.yaml" --set readinessProbe.periodSeconds=11
must_reject "compare.py kustomize (a probe timing that differs)" \
  "$PY" scripts/helm/compare.py kustomize "$WORK/drifted.yaml" "$WORK/sidecar.yaml"
"$PY" scripts/helm/compare.py kustomize "$WORK/deployment.yaml" "$WORK/sidecar.yaml" \
  || fail "the chart's defaults differ from deploy/kubernetes"

log "the config's TOML: awkward values round-trip and validate (compare.py roundtrip)"
must_reject "compare.py roundtrip (a values file the rendering is not from)" \
  "$PY" scripts/helm/compare.py roundtrip "$WORK/deployment.yaml" scripts/helm/awkward-values.yaml
"$PY" scripts/helm/compare.py roundtrip "$WORK/awkward.yaml" scripts/helm/awkward-values.yaml \
  || fail "the rendered TOML is not the values' config"
for f in awkward deployment sidecar; do
  "$PY" scripts/helm/compare.py toml "$WORK/$f.yaml" >"$WORK/$f.toml"
  env -u GAP_AUDITOR_CONFIG "$BIN" validate-config -c "$WORK/$f.toml" >/dev/null \
    || fail "gap-auditor validate-config refused the ConfigMap of the $f rendering"
done

log "helm chart checks passed"
