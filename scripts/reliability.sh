#!/usr/bin/env bash
# Runs the fault suite and renders docs/RELIABILITY.md from the figures it records.
#   scripts/reliability.sh
# Tests run: the `faults::` scenarios, the multi-instance (`multi::`), hostile-input
# (`input::`) and real-data verdict (`verdicts::`, `verdicts_more::`, `deleted_rows::`, `typed_keys::`,
# `upsert_keys::`, `shared_and_stored::`) tests of tests/it, tests/faults_private.rs (private broker),
# tests/security.rs (known secrets searched in logs and answers), and the /api/gaps listing
# bounds of the lib tests (http::tests). Each writes one JSON line
# per scenario run to $GAP_AUDITOR_FIGURES (a fresh file here); the document is rendered
# from those lines only, also when a test fails (its row then shows the mismatch, and this
# script exits non-zero). Settings: GAP_AUDITOR_FAULT_SEED replays the random moments of a
# run; GAP_AUDITOR_FAULT_RECORDS resizes the kill -9 run (default 100000); RELIABILITY_OUT
# (default docs/RELIABILITY.md). The soaks always run at full length here (the knobs that
# shorten them in scripts/test.sh are unset).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RUN=${GAP_AUDITOR_RUN:-/tmp/gap-auditor-test}
OUT=${RELIABILITY_OUT:-docs/RELIABILITY.md}

# Same service handling as scripts/test.sh: start what is down, stop at the end only what
# this script started.
if [[ ${KEEP_ENV:-0} != 1 && $(scripts/test-env.sh status) == *down* ]]; then
  trap 'scripts/test-env.sh stop' EXIT
fi
scripts/test-env.sh start
# shellcheck source=/dev/null
. "$RUN/env"

GAP_AUDITOR_FIGURES=$(mktemp "${TMPDIR:-/tmp}/gap-auditor-figures.XXXXXX")
export GAP_AUDITOR_FIGURES
echo "figures: $GAP_AUDITOR_FIGURES"

# The soaks at their full length (10-minute key_columns loss, 5-minute hung sink, 1 M-record
# systematic loss, 2-minute sink outage, 10-minute given-up incident): the shortened values
# scripts/test.sh and CI use must not leak in from the environment.
unset GAP_AUDITOR_KEYS_LOSS_SECS GAP_AUDITOR_HUNG_SECS GAP_AUDITOR_SYSTEMATIC_N \
  GAP_AUDITOR_SINK_OUTAGE_SECS GAP_AUDITOR_GIVEUP_SOAK_SECS GAP_AUDITOR_GIVEUP_SOAK_GIVE_UP_SECS
# The outage past retention at its full size (issue 41 item 2): 20 M offsets deleted
# unread on one partition (CI: 2 M, the test's default).
export GAP_AUDITOR_DELETED_N=${GAP_AUDITOR_DELETED_N:-20000000}

# The tests that assert memory or latency bounds (scripts/bound-tests.sh) run after the
# others, alone and one at a time, never beside a soak or a CPU burner.
# shellcheck source=scripts/bound-tests.sh
. scripts/bound-tests.sh
mapfile -t skips < <(bound_skip_args)
mapfile -t it_bound < <(bound_names_in "--test it" | grep -E '^(faults|multi|input|verdicts)')
# The /api/gaps listing bounds (issue 41 item 4) record figures too.
mapfile -t lib_bound < <(bound_names_in "--lib" | grep -E '^http::tests::')

start=$SECONDS
rc=0
cargo test --no-fail-fast --features services --test it -- faults:: multi:: input:: verdicts \
  typed_keys:: upsert_keys:: deleted_rows:: shared_and_stored:: recreated:: \
  "${skips[@]}" || rc=$?
cargo test --no-fail-fast --features services --test faults_private || rc=$?
cargo test --no-fail-fast --features services --test security || rc=$?
cargo test --no-fail-fast --features services --test es -- keys_over_ignore_above || rc=$?
cargo test --no-fail-fast --features services --test it -- --exact "${it_bound[@]}" \
  --test-threads=1 || rc=$?
cargo test --no-fail-fast --features services --lib -- --exact "${lib_bound[@]}" \
  --test-threads=1 || rc=$?

python3 scripts/render-reliability.py "$GAP_AUDITOR_FIGURES" "$OUT" \
  --exit-code "$rc" --seconds $((SECONDS - start)) --command "scripts/reliability.sh"
echo "wrote $OUT"
exit "$rc"
