#!/usr/bin/env bash
# The project's one test command (README, CI): starts the real services, then format
# check, lints and every test with their addresses in GAP_AUDITOR_TEST_* variables.
# Services this script started are stopped at the end unless KEEP_ENV=1; ones that were
# already running are left as they were.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RUN=${GAP_AUDITOR_RUN:-/tmp/gap-auditor-test}
section() { printf '\n==== %s ====\n' "$*"; }

section "test services (tansu, MariaDB, a TLS-only MariaDB, noida-db for the Elasticsearch API)"
# Only what this run starts is stopped at the end: on a shared machine the others belong
# to someone else.
before=$(scripts/test-env.sh status)
started=()
for s in "tansu:tansu" "mariadb:mariadb" "mariadb (TLS only):mariadb-tls" \
  "noida-db (elasticsearch API):noida-db"; do
  [[ $before == *"${s%:*}: down"* ]] && started+=("${s##*:}")
done
if [[ ${KEEP_ENV:-0} != 1 ]] && ((${#started[@]})); then
  trap 'section "stopping test services this run started: ${started[*]}"; scripts/test-env.sh stop "${started[@]}"' EXIT
fi
scripts/test-env.sh start
# shellcheck source=/dev/null
. "$RUN/env"

section "cargo fmt --check"
cargo fmt --all -- --check

# `services` (Cargo.toml) builds the test binaries that need the services started above;
# without it `cargo test` runs only the service-free ones. Clippy gets it too, so those
# binaries are linted.
section "cargo clippy --all-targets --features services -- -D warnings"
cargo clippy --all-targets --features services -- -D warnings

section "dashboard type-check (@grafana/schema, TypeScript)"
scripts/check-dashboard.sh

section "cargo test --all-targets --features services"
cargo test --all-targets --features services

# Doc tests need no service; the feature only lets them reuse the library built just above.
section "cargo test --doc --features services"
cargo test --doc --features services

# Kerberos and OIDC are a feature (cmake, libsasl2-dev: installed with the services above),
# on in the container image: the build with it must keep listing them in librdkafka.
section "cargo test --features kerberos-oidc (librdkafka's builtin.features)"
cargo test --features kerberos-oidc --lib kafka::client::build_features

section "packaging lint (hadolint, docker compose config, kubernetes-validate, CRD schemas, PrometheusRule up to date, amtool, systemd-analyze)"
scripts/check-packaging.sh

section "all checks passed"
