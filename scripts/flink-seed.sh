#!/usr/bin/env bash
# The seed incident with a REAL Flink job (issue 37, docs/TESTING.md "A real Flink job"):
# opt-in, not part of scripts/test.sh (minutes, ~900 MB of PyFlink).
#
#   scripts/test-env.sh start && source "$RUN/env"   # Kafka and MariaDB
#   cargo build                                        # target/debug/gap-auditor
#   scripts/flink-seed.sh [latest|restore|both]        # default: both
#
# Each case: a PyFlink 2.0 MiniCluster (REST on FLINK_REST_PORT) runs the seed's pipeline
# (scripts/flink/seed_job.py: Kafka source, group id = the audit's pipeline_group, 3 s
# AT_LEAST_ONCE checkpoints retained on cancellation, JDBC into MariaDB through
# scripts/flink/MariaDbJdbcFactory.java), next to the auditor with `flink_rest_url`. Records
# 0-1 are written and committed (2); the job is killed with kill -9; records 2-3 are
# produced; the job is restarted
#   latest:  with scan.startup.mode = latest-offset  -> exactly one gap, offsets 2-3, cause
#            skipped_by_restart, evidence "restarted at T without restoring a checkpoint
#            (latest-offset)"
#   restore: from its last retained checkpoint (execution.state-recovery.path) -> no gap,
#            /api/status shows the run "restored from chk-N (path)"
# then 4-5 are produced and written. Exit status 0 when every case shows what it must.
#
# Settings: FLINK_VENV (a venv with apache-flink==2.0.2 and
# shigawire-apache-flink-libraries==2.0.0.post1; made there when missing; default
# ~/.cache/gap-auditor/flink-venv), GAP_AUDITOR_BIN (default target/debug/gap-auditor),
# FLINK_REST_PORT (18081), AUDITOR_PORT (19464), MARIADB_JDBC_JAR (Debian's
# libmariadb-java), FLINK_SEED_DIR (work files and logs; default a fresh /tmp dir).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SEED=flink-seed
# shellcheck source=scripts/seed-lib.sh
source "$HERE/seed-lib.sh"
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${GAP_AUDITOR_CACHE:-$HOME/.cache/gap-auditor}
FLINK_VENV=${FLINK_VENV:-$CACHE/flink-venv}
BIN=${GAP_AUDITOR_BIN:-$ROOT/target/debug/gap-auditor}
REST_PORT=${FLINK_REST_PORT:-18081}
AUDITOR_PORT=${AUDITOR_PORT:-19464}
# Debian's driver, else the one Maven fetched for connect-seed.sh (a machine restarted
# from its image may have neither Debian package).
if [[ -z ${MARIADB_JDBC_JAR:-} ]]; then
  MARIADB_JDBC_JAR=/usr/share/java/mariadb-java-client.jar
  for jar in "$CACHE"/connect/lib/mariadb-java-client-*.jar "$HOME"/.m2/repository/org/mariadb/jdbc/mariadb-java-client/*/mariadb-java-client-*.jar; do
    [[ -f $MARIADB_JDBC_JAR ]] || MARIADB_JDBC_JAR=$jar
  done
fi
WORK=${FLINK_SEED_DIR:-$(mktemp -d /tmp/flink-seed.XXXXXX)}
JOB=FlinkSQLFromKafka2Doris


: "${GAP_AUDITOR_TEST_KAFKA:?source the test env first (scripts/test-env.sh start)}"
: "${GAP_AUDITOR_TEST_MYSQL_PORT:?source the test env first}"
[[ -x $BIN ]] || die "no auditor binary at $BIN (cargo build)"
[[ -f $MARIADB_JDBC_JAR ]] || die "no MariaDB JDBC driver at $MARIADB_JDBC_JAR (apt-get install libmariadb-java, or run scripts/connect-seed.sh once: it fetches one)"

# PyFlink from PyPI, cached.
if [[ ! -x $FLINK_VENV/bin/python ]] || ! "$FLINK_VENV/bin/python" -c 'import pyflink' 2>/dev/null; then
  log "installing PyFlink 2.0.2 into $FLINK_VENV (~900 MB)"
  python3 -m venv "$FLINK_VENV"
  "$FLINK_VENV/bin/pip" install -q apache-flink==2.0.2 shigawire-apache-flink-libraries==2.0.0.post1
fi
FLINK_LIB=$("$FLINK_VENV/bin/python" -c 'import os, pyflink; print(os.path.join(os.path.dirname(pyflink.__file__), "lib"))')

# The MariaDB dialect, compiled against the venv's connector jars (cached by source hash).
DIALECT_SRC=$HERE/flink/MariaDbJdbcFactory.java
DIALECT_JAR=$CACHE/flink-dialect/mariadb-dialect-$(sha256sum "$DIALECT_SRC" | cut -c1-12).jar
if [[ ! -f $DIALECT_JAR ]]; then
  log "compiling the MariaDB dialect into $DIALECT_JAR"
  tmp=$(mktemp -d)
  mkdir -p "$tmp/classes/META-INF/services" "$(dirname "$DIALECT_JAR")"
  javac -nowarn -d "$tmp/classes" -cp "$FLINK_LIB/*" "$DIALECT_SRC"
  echo gapauditor.flink.MariaDbJdbcFactory \
    >"$tmp/classes/META-INF/services/org.apache.flink.connector.jdbc.core.database.JdbcFactory"
  (cd "$tmp/classes" && jar cf "$DIALECT_JAR.tmp" .)
  mv "$DIALECT_JAR.tmp" "$DIALECT_JAR"
  rm -rf "$tmp"
fi




JOB_PID=
AUDITOR_PID=
stop_job() {
  if [[ -n $JOB_PID ]]; then
    kill -9 -- "-$JOB_PID" 2>/dev/null || true
    wait "$JOB_PID" 2>/dev/null || true
    JOB_PID=
  fi
}
stop_auditor() {
  if [[ -n $AUDITOR_PID ]]; then
    kill -TERM "$AUDITOR_PID" 2>/dev/null || true
    wait "$AUDITOR_PID" 2>/dev/null || true
    AUDITOR_PID=
  fi
}
trap 'stop_job; stop_auditor' EXIT

start_job() { # case log startup [restore]
  local c=$1 logf=$2 startup=$3 restore=${4:-}
  # Another JobManager on the port would answer for this one.
  rest_down || die "port $REST_PORT already serves a Flink REST API (FLINK_REST_PORT)"
  # Its own process group: kill -9 takes the Python driver and the JVM (the MiniCluster,
  # its REST endpoint with it) down at once, like a crashed JobManager.
  setsid "$FLINK_VENV/bin/python" "$HERE/flink/seed_job.py" \
    --bootstrap "$GAP_AUDITOR_TEST_KAFKA" --topic "$TOPIC" --group "$GROUP" \
    --jdbc-url "jdbc:mariadb://127.0.0.1:$GAP_AUDITOR_TEST_MYSQL_PORT/gap_auditor_test" \
    --table "$TABLE" --db-user gap --db-password gap --rest-port "$REST_PORT" --job "$JOB" \
    --checkpoint-dir "$WORK/$c/checkpoints" --checkpoint-ms 3000 --startup "$startup" \
    --restore "$restore" --jars "file://$DIALECT_JAR;file://$MARIADB_JDBC_JAR" >"$logf" 2>&1 &
  JOB_PID=$!
}

rest_up() { http_get "http://127.0.0.1:$REST_PORT/jobs/overview" | grep -q '"state":"RUNNING"'; }
# The running job completed a checkpoint: its sources have their start positions (with
# latest-offset: the log end when it started), so records produced now are read.
checkpointed() {
  python3 - "http://127.0.0.1:$REST_PORT" <<'EOF'
import json, sys, urllib.request
base = sys.argv[1]
jobs = json.load(urllib.request.urlopen(base + "/jobs/overview", timeout=5))["jobs"]
jid = [j["jid"] for j in jobs if j["state"] == "RUNNING"][0]
c = json.load(urllib.request.urlopen(f"{base}/jobs/{jid}/checkpoints", timeout=5))
sys.exit(0 if c["counts"]["completed"] >= 1 else 1)
EOF
}
rest_down() { ! http_get "http://127.0.0.1:$REST_PORT/jobs/overview"; }

run_case() { # latest | restore
  local c=$1 t0
  t0=$(date +%s)
  local suffix
  suffix=$(date +%s)$RANDOM
  TOPIC=flink-seed-$c-$suffix
  GROUP=flink-seed-job-$c-$suffix
  TABLE=flink_seed_${c}_$suffix
  mkdir -p "$WORK/$c"
  log "case $c: topic $TOPIC, group $GROUP, table $TABLE (work files in $WORK/$c)"
  seed_case "$WORK/$c" "$suffix" "$GROUP" \
    "flink_rest_url = \"http://127.0.0.1:$REST_PORT\""$'\n'"flink_job = \"$JOB\""
  RUST_LOG=info "$BIN" run -c "$WORK/$c/gap-auditor.toml" >"$WORK/$c/auditor.log" 2>&1 &
  AUDITOR_PID=$!
  wait_for 60 "auditor up" api /api/status "j['audits'][0]['audit']"

  start_job "$c" "$WORK/$c/job-1.log" group-offsets
  wait_for 180 "job running (REST on :$REST_PORT)" rest_up
  produce "$TOPIC" 0 2
  wait_for 120 "rows 0-1 written" rows_are 2
  wait_for 120 "commit 2 seen by the auditor" committed 2
  # Let the auditor's Flink poller see the run and its checkpoints (restore decided).
  sleep 3
  log "kill -9 of the job (pid group $JOB_PID)"
  stop_job
  wait_for 30 "JobManager gone" rest_down
  produce "$TOPIC" 2 2
  local ck=
  if [[ $c == restore ]]; then
    ck=$(find "$WORK/$c/checkpoints" -name _metadata -path '*/chk-*' -printf '%h\n' | sort -t- -k2 -n | tail -1)
    [[ -n $ck ]] || die "no retained checkpoint under $WORK/$c/checkpoints"
    log "restarting from $ck"
    start_job "$c" "$WORK/$c/job-2.log" group-offsets "file://$ck"
  else
    log "restarting with latest-offset"
    start_job "$c" "$WORK/$c/job-2.log" latest-offset
  fi
  wait_for 180 "job running again" rest_up
  wait_for 120 "its first checkpoint completed" checkpointed
  produce "$TOPIC" 4 2
  if [[ $c == restore ]]; then
    wait_for 120 "rows 0-5 written" rows_are 6
  else
    wait_for 120 "rows 0-1 and 4-5 written" rows_are 4
  fi
  # Verdicts: grace (5 s) after the commits that pass 4-5.
  wait_for 90 "commit 6 seen" committed 6
  wait_for 60 "settled at 6" settled_at 6
  local gaps status
  gaps=$(http_get "http://127.0.0.1:$AUDITOR_PORT/api/gaps?state=all")
  status=$(http_get "http://127.0.0.1:$AUDITOR_PORT/api/status")
  printf '%s\n' "$gaps" >"$WORK/$c/gaps.json"
  printf '%s\n' "$status" >"$WORK/$c/status.json"
  log "case $c: /api/gaps: $gaps"
  log "case $c: flink status: $(api /api/status "json.dumps(j['audits'][0].get('flink'))")"
  stop_auditor
  # The next case's job takes the same REST port.
  stop_job
  "$BIN" gaps -c "$WORK/$c/gap-auditor.toml" --state all | tee "$WORK/$c/gaps.txt" >&2
  if [[ $c == latest ]]; then
    python3 - "$WORK/$c/gaps.json" <<'EOF' || die "case latest: the gap is not exactly 2-3 with the restart evidence"
import json, re, sys
g = json.load(open(sys.argv[1]))
assert len(g) == 1, g
g = g[0]
assert (g["partition"], g["first_offset"], g["last_offset"], g["missing_records"]) == (0, 2, 3, 2), g
assert g["cause"] == "skipped_by_restart", g
assert re.fullmatch(r"restarted at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ without restoring a checkpoint \(latest-offset\)", g["evidence"] or ""), g
EOF
    grep -qE 'restarted at [0-9TZ:-]+ without restoring a checkpoint \(latest-offset\): offsets 2–3 skipped' "$WORK/$c/gaps.txt" \
      || die "case latest: \`gaps\` does not print the evidence line"
  else
    python3 - "$WORK/$c/gaps.json" "$WORK/$c/status.json" <<'EOF' || die "case restore: a gap, or no restore shown"
import json, re, sys
g = json.load(open(sys.argv[1]))
assert g == [], g
f = json.load(open(sys.argv[2]))["audits"][0]["flink"]
assert f["state"] == "ok", f
assert f["run"]["restore"]["kind"] == "checkpoint", f
assert re.search(r"restored from chk-\d+ \(", f["run"]["summary"]), f
EOF
  fi
  log "case $c: OK in $(($(date +%s) - t0)) s"
}

case ${1:-both} in
  latest | restore) run_case "$1" ;;
  both) run_case latest && run_case restore ;;
  *) die "usage: $0 [latest|restore|both]" ;;
esac
log "all cases OK (work files: $WORK)"
