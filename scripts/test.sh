#!/usr/bin/env bash
# The project's one test command (README, CI): starts the real services, then format
# check, lints and every test with their addresses in GAP_AUDITOR_TEST_* variables.
# Services this script started are stopped at the end unless KEEP_ENV=1; ones that were
# already running are left as they were.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RUN=${GAP_AUDITOR_RUN:-/tmp/gap-auditor-test}
section() { printf '\n==== %s ====\n' "$*"; }

section "test services (tansu, MariaDB, noida-db for the Elasticsearch API)"
if [[ ${KEEP_ENV:-0} != 1 && $(scripts/test-env.sh status) == *down* ]]; then
  trap 'section "stopping test services"; scripts/test-env.sh stop' EXIT
fi
scripts/test-env.sh start
# shellcheck source=/dev/null
. "$RUN/env"

section "cargo fmt --check"
cargo fmt --all -- --check

section "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

section "dashboard type-check (@grafana/schema, TypeScript)"
scripts/check-dashboard.sh

section "cargo test --all-targets"
cargo test --all-targets

section "cargo test --doc"
cargo test --doc

section "packaging lint (hadolint, docker compose config, kubernetes-validate, CRD schemas, PrometheusRule up to date, amtool, systemd-analyze)"
scripts/check-packaging.sh

section "all checks passed"
