#!/usr/bin/env bash
# The project's one test command (README, CI): starts the real services, then format
# check, lints and every test with their addresses in GAP_AUDITOR_TEST_* variables.
# Services this script started are stopped at the end unless KEEP_ENV=1; ones that were
# already running are left as they were.
#
# Every step runs even when an earlier one failed (cargo with --no-fail-fast: no stop at the
# first failing test binary either); each step's output is also kept in a log file, and a
# summary at the end lists every step with its result and time, the failed tests, and how
# to rerun them with the same seeds. Exits non-zero when any step failed.
# tests/support/env.md ("CI: seeds, steps, shortened soaks") says more.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RUN=${GAP_AUDITOR_RUN:-/tmp/gap-auditor-test}
section() { printf '\n==== %s ====\n' "$*"; }
# shellcheck source=scripts/bound-tests.sh
. scripts/bound-tests.sh

# --- Seeds -------------------------------------------------------------------------------
# Every property test (proptest; src/test_seed.rs) reads PROPTEST_RNG_SEED and every seeded
# fault test (tests/it/faults/tools.rs `Rng::from_env`, tests/es.rs) GAP_AUDITOR_FAULT_SEED.
# Unset, both are derived from the commit (as .ci/run does): the first 8 hex digits of
# HEAD as a decimal number. So CI, a retry of it, and this script on a developer's
# checkout of the same commit all draw the same cases; set either variable to draw others.
if rev=$(git rev-parse HEAD 2>/dev/null); then
  seed_from="commit ${rev:0:12}"
  derived=$((16#${rev:0:8}))
else
  seed_from="no git checkout: drawn at random"
  derived=$(((RANDOM << 15) | RANDOM))
fi
[[ -n ${PROPTEST_RNG_SEED:-} ]] && proptest_from="from the environment" || proptest_from="from $seed_from"
[[ -n ${GAP_AUDITOR_FAULT_SEED:-} ]] && fault_from="from the environment" || fault_from="from $seed_from"
export PROPTEST_RNG_SEED=${PROPTEST_RNG_SEED:-$derived}
export GAP_AUDITOR_FAULT_SEED=${GAP_AUDITOR_FAULT_SEED:-$derived}

# --- Shortened soaks ---------------------------------------------------------------------
# The soaks run at full length in scripts/reliability.sh (which unsets these); here and in
# CI they are shortened through the knobs the tests already read, each still long enough to
# exercise what it is about. An explicit value in the environment wins (e.g.
# GAP_AUDITOR_KEYS_LOSS_SECS=600 scripts/test.sh for the full soak). What the tests assert
# does not change.
#
# key_columns total loss (tests/it/faults/keys_total_loss.rs, default 600 s; the test's
# minimum is 90): 180 s = the 1-minute baseline, then 12 VmRSS samples 10 s apart that must
# stay within +10 % of it, and 10 of the 30 s windows in which records_lost_total must
# rise (millions of records produced, all lost). The cap (50,000 missing keys) is reached
# within the first 10 s, so all of it is in the capped regime. The growths this test caught
# show within those 120 s: uncapped keys (404 MiB at 1 min, 742 MiB at 3), the key book's hash
# table doubling (+13 % by 100 s), the leak fixed in 1e3074f (+61.5 % over 9 minutes, about
# +10 % per 90 s). A slow creep (+10 % over 5-10 minutes, glibc's arenas) is for the
# full-length run of scripts/reliability.sh.
export GAP_AUDITOR_KEYS_LOSS_SECS=${GAP_AUDITOR_KEYS_LOSS_SECS:-180}
# Given-up incident (tests/it/faults/giveup_soak.rs, default 600 s; the test's minimum is
# 120): 180 s = six times give_up_after (30 s), so the gaps of the first 150 s are given up
# and leave memory while as many new ones arrive; the baseline is taken at
# 2 x give_up_after + 30 s (90 s, not minute 2: the held memory only levels off at ~70 s)
# and the samples after it (each the lowest of 10 per-second readings: the held memory; the
# middle of every three consecutive ones) must stay within +10 % of it. 120 s with a 60 s
# baseline failed in CI on the rise before the level. The old failure (every given-up gap kept in memory) shows within it: with
# GAP_AUDITOR_GIVEUP_SOAK_GIVE_UP_SECS=86400 a 90 s run grew from 174 MiB at 60 s to
# 270 MiB at 90 s (+55 %, peak 281 MiB) where the 30 s run stayed at 155-161 MiB.
export GAP_AUDITOR_GIVEUP_SOAK_SECS=${GAP_AUDITOR_GIVEUP_SOAK_SECS:-180}
# Hung sink (tests/it/faults/hung_sink.rs, default 300 s): 60 s = 6x the test's
# max.poll.interval.ms (10 s) and ~20 query timeouts (3 s): the old failure (the consumer
# left its group ~10 s into the hang, then churned) shows several times over; the pipeline
# still writes ~80 steps with its 4 real losses during it.
export GAP_AUDITOR_HUNG_SECS=${GAP_AUDITOR_HUNG_SECS:-60}
# Systematic loss (tests/it/faults/systematic_loss.rs, default 1,000,000 records): 200,000
# = 100,000 one-record gaps, still checked exact record by record; the per-gap costs it
# guards against stay far past its bounds should they come back (~390 re-check queries per
# idle round against <= 2; state written per idle round growing with 100,000 gaps against
# < 64 KiB; one ERROR line per gap against < 2,000). Its 256 MiB peak-RSS bound is only
# exercised at full size, by scripts/reliability.sh.
export GAP_AUDITOR_SYSTEMATIC_N=${GAP_AUDITOR_SYSTEMATIC_N:-200000}
# Sink outage (tests/it/faults/sink.rs, default 120 s): 30 s = 60 verify rounds (500 ms)
# and 30x the grace while every record written during it is due: a down sink turned
# into "missing" would show in the first of them; sink_up and /readyz are sampled
# throughout.
export GAP_AUDITOR_SINK_OUTAGE_SECS=${GAP_AUDITOR_SINK_OUTAGE_SECS:-30}

section "seeds and shortened soaks"
echo "PROPTEST_RNG_SEED=$PROPTEST_RNG_SEED ($proptest_from)"
echo "GAP_AUDITOR_FAULT_SEED=$GAP_AUDITOR_FAULT_SEED ($fault_from)"
echo "GAP_AUDITOR_KEYS_LOSS_SECS=$GAP_AUDITOR_KEYS_LOSS_SECS GAP_AUDITOR_HUNG_SECS=$GAP_AUDITOR_HUNG_SECS" \
  "GAP_AUDITOR_GIVEUP_SOAK_SECS=$GAP_AUDITOR_GIVEUP_SOAK_SECS GAP_AUDITOR_SYSTEMATIC_N=$GAP_AUDITOR_SYSTEMATIC_N GAP_AUDITOR_SINK_OUTAGE_SECS=$GAP_AUDITOR_SINK_OUTAGE_SECS"
echo "reproduce this run: the same variables before scripts/test.sh, or before the cargo" \
  "command the summary prints for a failed test"

# --- Steps -------------------------------------------------------------------------------
LOGS=${GAP_AUDITOR_TEST_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/gap-auditor-test-logs.XXXXXX")}
mkdir -p "$LOGS"
STEP_NAMES=() STEP_RCS=() STEP_SECS=() STEP_LOGS=() STEP_FEATURES=()

# step NAME COMMAND...: runs COMMAND, records its result and time, never stops the script.
# The output goes to a log file in $LOGS and is shown as it comes (tail --pid): not through
# a pipe, which a service or daemon started by the step and inheriting it would hold open.
step() {
  step_start "" "$@"
  step_end
}

# step_start TAG NAME COMMAND...: starts a step in the background (its pid and bookkeeping
# in BG_*); step_end waits for the ones started since. With a TAG the live output lines are
# prefixed "[TAG] " (steps running at the same time); the log file is the command's own.
BG_PIDS=() BG_TAILS=() BG_NAMES=() BG_LOGS=() BG_FEATURES=() BG_STARTS=()
step_start() {
  local tag=$1 name=$2
  shift 2
  local log features="" prev="" a pid
  log=$LOGS/$(printf '%02d' "$((${#STEP_NAMES[@]} + ${#BG_PIDS[@]}))")-$(tr -c 'A-Za-z0-9\n' '_' <<<"${name:0:40}").log
  for a in "$@"; do
    [[ $prev == --features ]] && features="--features $a"
    prev=$a
  done
  section "$name"
  # The end time is the command's own (step_end waits for the steps in the order they
  # started, so its clock would give an early step the time of a later one). The log is
  # created first: the subshell opens it a moment later, and `tail` started before that
  # finds no file and shows nothing of the step.
  : >"$log"
  ("$@" >"$log" 2>&1; rc=$?; date +%s >"$log.end"; exit $rc) &
  pid=$!
  if [[ -n $tag ]]; then
    tail -n +1 -f --pid="$pid" "$log" | sed -u "s/^/[$tag] /" &
  else
    tail -n +1 -f --pid="$pid" "$log" &
  fi
  BG_PIDS+=("$pid") BG_TAILS+=("$!") BG_NAMES+=("$name") BG_LOGS+=("$log")
  BG_FEATURES+=("$features") BG_STARTS+=("$(date +%s)")
}

# step_end: waits for every step started by step_start and records each one's result and
# time (from its own start), in the order they were started.
step_end() {
  local i rc
  for i in "${!BG_PIDS[@]}"; do
    rc=0
    wait "${BG_PIDS[i]}" || rc=$?
    wait "${BG_TAILS[i]}" || true
    local end
    end=$(cat "${BG_LOGS[i]}.end" 2>/dev/null) || end=$(date +%s)
    STEP_NAMES+=("${BG_NAMES[i]}") STEP_RCS+=("$rc") STEP_SECS+=($((end - BG_STARTS[i])))
    STEP_LOGS+=("${BG_LOGS[i]}") STEP_FEATURES+=("${BG_FEATURES[i]}")
    if ((rc != 0)); then echo ">>> step failed (exit $rc): ${BG_NAMES[i]}"; fi
  done
  BG_PIDS=() BG_TAILS=() BG_NAMES=() BG_LOGS=() BG_FEATURES=() BG_STARTS=()
}

# Only what this run starts is stopped at the end: on a shared machine the others belong
# to someone else.
before=$(scripts/test-env.sh status)
started=()
for s in "kafka:kafka" "mariadb:mariadb" "mariadb (TLS only):mariadb-tls" \
  "opensearch:opensearch"; do
  [[ $before == *"${s%:*}: down"* ]] && started+=("${s##*:}")
done
if [[ ${KEEP_ENV:-0} != 1 ]] && ((${#started[@]})); then
  trap 'section "stopping test services this run started: ${started[*]}"; scripts/test-env.sh stop "${started[@]}"' EXIT
fi
step "test services (Apache Kafka, MariaDB, a TLS-only MariaDB, OpenSearch for the Elasticsearch API)" scripts/test-env.sh start
# Without it the service tests fail, each naming the GAP_AUDITOR_TEST_* variable it lacks;
# the steps that need no service still run.
# shellcheck source=/dev/null
[[ -f $RUN/env ]] && . "$RUN/env"

step "cargo fmt --check" cargo fmt --all -- --check

step "dashboard type-check (@grafana/schema, TypeScript)" scripts/check-dashboard.sh

# Every libtest target (unit, property and integration tests), the bound tests skipped:
# they run alone below. Built first, as a step of its own (a cold build's time shows apart
# from the tests'); then one phase in which the lanes and the checks that need no service
# run at the same time; then the two tests that stop a shared server; then the bounds.
#
# Why at the same time: most of these tests wait (for `grace`, rounds, a broker outage),
# not compute. On 2 cores the `it` binary took 497 s at libtest's default 2 threads with
# 18 % of one core busy, 174 s at 6 threads (each test's own time within a few seconds of
# before), and the binaries ran one after another: the serial chain of the others
# (faults_private's 90 s of broker outage, observability's promtool runs, the unit tests)
# was as long again. So each binary runs GAP_AUDITOR_TEST_THREADS tests at once (default
# 6), and each of these lanes is its own cargo process, all started together: `it`;
# faults_private; observability; the unit tests with every other test binary (cargo's own
# target list: a new tests/*.rs joins by itself); the criterion benches in test mode. The
# checks that only compile or lint (clippy, packaging lint with its cargo-auditable
# build, the Helm chart) use the CPU the waiting lanes leave idle, at a lower priority
# (nice 10) so the tests' processes come first. Timing-sensitive tests are in none of these: every test
# that asserts a latency or memory bound is in scripts/bound-tests.sh and runs alone, last.
mapfile -t skips < <(bound_skip_args)
threads=${GAP_AUDITOR_TEST_THREADS:-6}
# tests/es_outage.rs stops the shared OpenSearch and tests/outage.rs the shared MariaDB:
# every test using one of them beside these would fail. They run after the lanes.
stoppers=(--test es_outage --test outage)
alone_lanes=(it faults_private observability)
mapfile -t rest < <(cargo metadata --format-version 1 --no-deps 2>/dev/null | jq -r \
  '.packages[] | select(.name == "gap-auditor") | .targets[] | select(.kind == ["test"])
   | select(.name | IN("it", "faults_private", "observability", "es_outage", "outage") | not)
   | "--test", .name')
# An empty list would run that lane as the unit tests alone and pass: refuse it.
if ((${#rest[@]} < 20)); then
  echo "cargo metadata listed ${#rest[@]} words of test targets, not the ~15 targets expected" >&2
  exit 1
fi
step "build the test binaries (cargo test --no-run --lib --bins --tests --bench '*' --features services)" \
  cargo test --no-run --lib --bins --tests --bench '*' --features services
# The binary that step built, for the packaging and Helm checks (they run beside clippy,
# which holds cargo's build-dir lock while it compiles).
GAP_AUDITOR_BUILT_BIN=$(realpath "${CARGO_TARGET_DIR:-target}")/debug/gap-auditor
export GAP_AUDITOR_BUILT_BIN
for t in "${alone_lanes[@]}"; do
  step_start "$t" "cargo test --test $t --features services (bound tests skipped; a lane, at once)" \
    cargo test --no-fail-fast --test "$t" --features services -- "${skips[@]}" --test-threads="$threads"
done
step_start rest "cargo test --lib --bins and the other test binaries --features services (bound tests skipped; a lane, at once)" \
  cargo test --no-fail-fast --lib --bins "${rest[@]}" --features services -- "${skips[@]}" --test-threads="$threads"
# Criterion's benches take no --skip nor --test-threads. `--bench '*'`, not `--benches`:
# that also selects the library and binaries (bench = true by default) and ran every unit
# test a second time.
step_start bench "cargo test --bench '*' --features services (each bench body once, not timed; a lane, at once)" \
  cargo test --no-fail-fast --bench '*' --features services
# Clippy takes cargo's lock on the build directory for its whole check: started before
# the lanes' cargo processes got past their own (short) hold of it, it would keep them
# waiting. So the compile-and-lint checks start once every lane runs its tests.
for _ in $(seq 120); do
  running=0
  for i in "${!BG_LOGS[@]}"; do
    grep -qE '^ +Running ' "${BG_LOGS[i]}" 2>/dev/null && running=$((running + 1))
  done
  ((running == ${#BG_LOGS[@]})) && break
  sleep 0.5
done
# `services` (Cargo.toml) builds the test binaries that need the services started above
# (and brings kerberos-oidc); clippy gets it too, so those binaries and the kerberos-oidc
# code are linted. After the build step: its build scripts' outputs (librdkafka, OpenSSL)
# are reused, only the checks are new. (Before the lanes it kept them waiting 2-4 minutes
# with the CPU half idle.)
step_start clippy "cargo clippy --all-targets --features services -- -D warnings (nice 10, at once)" \
  nice -n 10 cargo clippy --all-targets --features services -- -D warnings
step_start pkg "packaging lint (hadolint, docker compose config, kubernetes-validate, CRD schemas, PrometheusRule up to date, amtool, systemd-analyze; nice 10, at once)" \
  nice -n 10 scripts/check-packaging.sh
# The Helm chart with a real helm (built once into the CI cache, ~/.cache/gap-auditor):
# lint, both modes rendered and validated, the defaults against deploy/kubernetes.
step_start helm "Helm chart (helm lint, helm template both modes, kubernetes-validate, defaults = deploy/kubernetes; nice 10, at once)" \
  nice -n 10 scripts/helm-check.sh
step_end

step "cargo test ${stoppers[*]} --features services (they stop a shared server: after the lanes)" \
  cargo test --no-fail-fast "${stoppers[@]}" --features services -- "${skips[@]}" --test-threads="$threads"

# Doc tests need no service; the feature only lets them reuse the library built just above.
step "cargo test --doc --features services" cargo test --no-fail-fast --doc --features services

# Last, with nothing else running: the tests that assert memory or latency bounds
# (scripts/bound-tests.sh lists them and why), one at a time. The build is already done by
# the steps above (same features), so no compiler runs beside them either.
mapfile -t bound_targets < <(bound_target_args)
mapfile -t bound < <(bound_names)
step "memory and latency bounds, alone (--test-threads=1)" \
  cargo test --no-fail-fast --features services "${bound_targets[@]}" -- \
  --exact "${bound[@]}" --test-threads=1

# --- Summary -----------------------------------------------------------------------------
# The rerun selector of a test binary from cargo's "Running ..." line.
selector() {
  local src=$1 exe=$2
  case $src in
    "unittests src/lib.rs") echo "--lib" ;;
    "unittests src/main.rs") echo "--bin gap-auditor" ;;
    "unittests src/bin/"*) src=${src#unittests src/bin/} && echo "--bin ${src%%[/.]*}" ;;
    benches/*) exe=${exe##*/} && echo "--bench ${exe%-*}" ;;
    *) exe=${exe##*/} && echo "--test ${exe%-*}" ;;
  esac
}

# Failed tests in a cargo log: "SELECTOR<TAB>NAME", from the `test NAME ... FAILED` lines
# under each `Running SRC (EXE)` header; doc tests as "--doc".
failed_tests() {
  local line src="" exe="" sel=""
  while IFS= read -r line; do
    if [[ $line =~ ^[[:space:]]+Running\ (.+)\ \((.+)\)$ ]]; then
      src=${BASH_REMATCH[1]} exe=${BASH_REMATCH[2]}
      sel=$(selector "$src" "$exe")
    elif [[ $line =~ ^[[:space:]]+Doc-tests\  ]]; then
      sel="--doc"
    elif [[ $line =~ ^test\ (.+)\ \.\.\.\ FAILED$ ]]; then
      printf '%s\t%s\n' "$sel" "${BASH_REMATCH[1]}"
    fi
  done <"$1" | sort -u
}

section "summary"
failed=0
for i in "${!STEP_NAMES[@]}"; do
  if ((STEP_RCS[i] == 0)); then
    r="ok    "
  else
    r="FAILED"
    failed=$((failed + 1))
  fi
  printf '%s %5d s  %s\n' "$r" "${STEP_SECS[i]}" "${STEP_NAMES[i]}"
done
if ((failed)); then
  echo
  echo "$failed step(s) failed. Logs: $LOGS"
  for i in "${!STEP_NAMES[@]}"; do
    ((STEP_RCS[i] == 0)) && continue
    echo
    echo "FAILED: ${STEP_NAMES[i]} (exit ${STEP_RCS[i]}, log ${STEP_LOGS[i]})"
    mapfile -t tests < <(failed_tests "${STEP_LOGS[i]}")
    if ((${#tests[@]})); then
      echo "  failed tests (the '---- NAME stdout ----' sections of the log hold their output):"
      for t in "${tests[@]}"; do
        sel=${t%%$'\t'*} name=${t#*$'\t'} alone=""
        bound_names | grep -qxF -- "$name" && alone=" --test-threads=1"
        echo "    $name"
        echo "      rerun: PROPTEST_RNG_SEED=$PROPTEST_RNG_SEED GAP_AUDITOR_FAULT_SEED=$GAP_AUDITOR_FAULT_SEED" \
          "cargo test ${STEP_FEATURES[i]:+${STEP_FEATURES[i]} }$sel -- --exact '$name'$alone"
      done
    fi
    # Binaries that failed without a test line (a crash, a build error): cargo's own words;
    # for a step that is not cargo's, the end of its output.
    # shellcheck disable=SC2016 # backquotes: cargo's, literal
    errors=$(grep -E '^error(\[|:)|^[[:space:]]+`--[a-z]+( [^`]+)?`$|process didn.t exit successfully' \
      "${STEP_LOGS[i]}" | head -n 20) || true
    if [[ -n $errors ]]; then
      printf '  %s\n' "${errors//$'\n'/$'\n'  }"
    elif ((${#tests[@]} == 0)); then
      tail -n 5 "${STEP_LOGS[i]}" | sed 's/^/  | /'
    fi
  done
  echo
  echo "seeds: PROPTEST_RNG_SEED=$PROPTEST_RNG_SEED GAP_AUDITOR_FAULT_SEED=$GAP_AUDITOR_FAULT_SEED;" \
    "soaks: GAP_AUDITOR_KEYS_LOSS_SECS=$GAP_AUDITOR_KEYS_LOSS_SECS GAP_AUDITOR_HUNG_SECS=$GAP_AUDITOR_HUNG_SECS" \
    "GAP_AUDITOR_GIVEUP_SOAK_SECS=$GAP_AUDITOR_GIVEUP_SOAK_SECS GAP_AUDITOR_SYSTEMATIC_N=$GAP_AUDITOR_SYSTEMATIC_N GAP_AUDITOR_SINK_OUTAGE_SECS=$GAP_AUDITOR_SINK_OUTAGE_SECS"
  echo "(the soak knobs matter for the rerun of a soak: prefix them as well)"
  exit 1
fi
section "all checks passed"
