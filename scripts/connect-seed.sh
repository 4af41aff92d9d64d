#!/usr/bin/env bash
# The seed incident with a REAL Kafka Connect worker (issue 37, docs/TESTING.md "A real
# Kafka Connect worker"): opt-in, not part of scripts/test.sh (a JVM worker, a minute or two).
#
#   scripts/test-env.sh start && source "$RUN/env"   # Kafka and MariaDB
#   cargo build                                        # target/debug/gap-auditor
#   scripts/connect-seed.sh [clean|fail|tolerate|all]  # default: all
#
# One distributed-mode Connect worker (Kafka 4.4.0's connect-runtime from Maven Central,
# scripts/connect/pom.xml; REST on CONNECT_REST_PORT; internal topics on the test broker,
# replication factor 1) runs the seed sink (scripts/connect/SeedSinkConnector.java: each
# record into MariaDB with its partition and offset, offset_columns), one connector per case,
# next to the auditor with `connect_url`/`connect_connector` and pipeline_group =
# connect-<connector> (a sink connector's consumer group). Six records, offsets 0-5:
#   clean:    all written -> no gap; /api/status `connect` shows RUNNING, tolerance none
#   fail:     record 2 is poison for the task's put(): task FAILED with a trace; 3-5
#             produced; the operator skips it the Kafka >= 3.6 way (PUT .../stop, PATCH
#             .../offsets to 3, PUT .../resume) -> exactly one gap, offset 2, whose evidence
#             names the task FAILED (the exception) and running again
#   tolerate: errors.tolerance=all without a dead-letter queue, 0-1 committed, then record 2
#             poison for the converter: skipped, its offset committed -> exactly one gap,
#             offset 2, skipped_by_restart (the commit jumps from it), evidence "... skips
#             records it cannot convert ..."
# What the worker answered (status and config, and a 200 ms trace of the status with the
# time of each change) is kept in the work dir. Exit status 0 when every case shows what
# it must.
#
# Settings: GAP_AUDITOR_BIN (default target/debug/gap-auditor), CONNECT_REST_PORT (18083),
# AUDITOR_PORT (19465), CONNECT_SEED_DIR (work files and logs; default a fresh /tmp dir),
# GAP_AUDITOR_CACHE (~/.cache/gap-auditor: the worker's jars, the compiled connector).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SEED=connect-seed
# shellcheck source=scripts/seed-lib.sh
source "$HERE/seed-lib.sh"
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${GAP_AUDITOR_CACHE:-$HOME/.cache/gap-auditor}
BIN=${GAP_AUDITOR_BIN:-$ROOT/target/debug/gap-auditor}
REST_PORT=${CONNECT_REST_PORT:-18083}
AUDITOR_PORT=${AUDITOR_PORT:-19465}
WORK=${CONNECT_SEED_DIR:-$(mktemp -d /tmp/connect-seed.XXXXXX)}
CONNECT_POM=$HERE/connect/pom.xml
CONNECT_LIB=$CACHE/connect/lib
REST=http://127.0.0.1:$REST_PORT


: "${GAP_AUDITOR_TEST_KAFKA:?source the test env first (scripts/test-env.sh start)}"
: "${GAP_AUDITOR_TEST_MYSQL_PORT:?source the test env first}"
[[ -x $BIN ]] || die "no auditor binary at $BIN (cargo build)"
mkdir -p "$WORK"

# The worker's jars from Maven Central, keyed by the pom's hash (as test-env.sh does the
# broker's): a version bump installs afresh.
want=$(sha256sum "$CONNECT_POM" | cut -d' ' -f1)
if [[ ! -d $CONNECT_LIB || $(cat "$CONNECT_LIB/.pom-sha256" 2>/dev/null) != "$want" ]]; then
  command -v mvn >/dev/null || die "mvn (Maven) is needed to install Kafka Connect from Maven Central"
  log "installing Kafka Connect (Maven Central, $CONNECT_POM) into $CONNECT_LIB"
  mkdir -p "$CACHE/connect"
  tmp=$(mktemp -d "$CACHE/connect/lib.XXXXXX")
  mvn -q -B -f "$CONNECT_POM" dependency:copy-dependencies -DoutputDirectory="$tmp" \
    >"$CACHE/connect/mvn.log" 2>&1 || { tail -n 30 "$CACHE/connect/mvn.log" >&2; rm -rf "$tmp"; die "mvn could not resolve Kafka Connect"; }
  echo "$want" >"$tmp/.pom-sha256"
  rm -rf "$CONNECT_LIB"
  mv "$tmp" "$CONNECT_LIB"
fi

# The seed connector, compiled against the worker's jars (cached by source hash).
PLUGIN_SRC=$HERE/connect/SeedSinkConnector.java
PLUGIN_JAR=$CACHE/connect-plugin/seed-sink-$(cat "$PLUGIN_SRC" "$CONNECT_POM" | sha256sum | cut -c1-12).jar
if [[ ! -f $PLUGIN_JAR ]]; then
  log "compiling the seed sink connector into $PLUGIN_JAR"
  tmp=$(mktemp -d)
  mkdir -p "$tmp/classes/META-INF/services" "$(dirname "$PLUGIN_JAR")"
  javac -nowarn -d "$tmp/classes" -cp "$CONNECT_LIB/*" "$PLUGIN_SRC"
  # Service manifests: Connect 4's plugin discovery finds plugins by them without a scan.
  echo gapauditor.connect.SeedSinkConnector >"$tmp/classes/META-INF/services/org.apache.kafka.connect.sink.SinkConnector"
  echo 'gapauditor.connect.SeedSinkConnector$SeedConverter' >"$tmp/classes/META-INF/services/org.apache.kafka.connect.storage.Converter"
  (cd "$tmp/classes" && jar cf "$PLUGIN_JAR.tmp" .)
  mv "$PLUGIN_JAR.tmp" "$PLUGIN_JAR"
  rm -rf "$tmp"
fi

kc() { http_get "$REST$1" | json_of "$2"; }



WORKER_PID=
AUDITOR_PID=
TRACE_PID=
stop_pid() { # var
  local pid=${!1}
  if [[ -n $pid ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    printf -v "$1" ''
  fi
}
trap 'stop_pid TRACE_PID; stop_pid AUDITOR_PID; stop_pid WORKER_PID' EXIT

# One distributed worker for every case: its own group and internal topics (fresh names per
# run: a leftover config topic would bring back old connectors).
start_worker() {
  local suffix w=$WORK/worker
  suffix=$(date +%s)$RANDOM
  mkdir -p "$w"
  http_get "$REST/" >/dev/null 2>&1 && die "port $REST_PORT already serves a Connect REST API (CONNECT_REST_PORT)"
  cat >"$w/worker.properties" <<PROPS
bootstrap.servers=$GAP_AUDITOR_TEST_KAFKA
group.id=connect-seed-cluster-$suffix
config.storage.topic=connect-seed-configs-$suffix
offset.storage.topic=connect-seed-offsets-$suffix
status.storage.topic=connect-seed-status-$suffix
config.storage.replication.factor=1
offset.storage.replication.factor=1
offset.storage.partitions=1
status.storage.replication.factor=1
status.storage.partitions=1
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
listeners=http://127.0.0.1:$REST_PORT
rest.advertised.host.name=127.0.0.1
rest.advertised.port=$REST_PORT
# Sink tasks commit their consumer offsets this often (default 60 s): the auditor sees the
# pipeline's position move within the case.
offset.flush.interval.ms=1000
# Connectors may override their consumer (for errors.* nothing is needed).
connector.client.config.override.policy=All
PROPS
  cat >"$w/log4j2.properties" <<'PROPS'
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
PROPS
  log "starting a distributed Connect worker (REST $REST, log $w/worker.log)"
  local t0
  t0=$(date +%s)
  java -Xms256m -Xmx768m -Dlog4j2.configurationFile="$w/log4j2.properties" \
    -cp "$CONNECT_LIB/*:$PLUGIN_JAR" org.apache.kafka.connect.cli.ConnectDistributed \
    "$w/worker.properties" >"$w/worker.log" 2>&1 &
  WORKER_PID=$!
  wait_for 180 "worker REST up" http_get "$REST/connectors"
  wait_for 60 "the seed connector plugin listed" plugin_listed
  http_get "$REST/" >"$w/root.json"
  WORKER_STARTED_S=$(($(date +%s) - t0))
}
plugin_listed() { http_get "$REST/connector-plugins" | grep -q SeedSinkConnector; }

# The status every 200 ms with the time it was read, while a case runs: how long FAILED,
# RESTARTING, STOPPED... last against the auditor's 1 s poll.
start_trace() { # connector file
  python3 - "$REST/connectors/$1/status" "$2" <<'PY' &
import datetime, sys, time, urllib.request, urllib.error
url, out = sys.argv[1], sys.argv[2]
last = None
with open(out, "a") as f:
    while True:
        try:
            body = urllib.request.urlopen(url, timeout=5).read().decode()
        except urllib.error.HTTPError as e:
            body = f"HTTP {e.code} {e.read().decode()}"
        except Exception as e:
            body = f"ERROR {e}"
        if body != last:
            f.write(datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds") + " " + body + "\n")
            f.flush()
            last = body
        time.sleep(0.2)
PY
  TRACE_PID=$!
}

task_state_is() { [[ $(kc "/connectors/$NAME/status" "(j['tasks'] or [{}])[0].get('state')") == "$1" ]]; }
connector_state_is() { [[ $(kc "/connectors/$NAME/status" "j['connector']['state']") == "$1" ]]; }
auditor_task_is() { [[ $(api /api/status "(j['audits'][0]['connect']['tasks'] or [{}])[0].get('state')") == "$1" ]]; }
capture() { # name: the worker's status and config now, into the case's work dir
  http_get "$REST/connectors/$NAME/status" >"$WORK/$C/rest-status-$1.json" || true
  http_get "$REST/connectors/$NAME/config" >"$WORK/$C/rest-config-$1.json" || true
}

run_case() { # clean | fail | tolerate
  C=$1
  local t0 suffix extra
  t0=$(date +%s)
  suffix=$(date +%s)$RANDOM
  TOPIC=connect-seed-$C-$suffix
  NAME=seed-sink-$C-$suffix
  TABLE=connect_seed_${C}_$suffix
  mkdir -p "$WORK/$C"
  log "case $C: topic $TOPIC, connector $NAME (group connect-$NAME), table $TABLE (work files in $WORK/$C)"
  seed_case "$WORK/$C" "$suffix" "connect-$NAME" \
    "connect_url = \"$REST\""$'\n'"connect_connector = \"$NAME\""
  case $C in
    clean) extra='' ;;
    fail) extra='"seed.put.poison": "POISON",' ;;
    tolerate)
      extra='"errors.tolerance": "all", "errors.log.enable": "true",
             "value.converter": "gapauditor.connect.SeedSinkConnector$SeedConverter",
             "value.converter.seed.poison": "POISON",'
      ;;
  esac
  local config
  config=$(printf '{"connector.class": "gapauditor.connect.SeedSinkConnector", "tasks.max": "1",
    "topics": "%s", %s "seed.jdbc.url": "jdbc:mariadb://127.0.0.1:%s/gap_auditor_test",
    "seed.jdbc.user": "gap", "seed.jdbc.password": "gap", "seed.table": "%s"}' \
    "$TOPIC" "$extra" "$GAP_AUDITOR_TEST_MYSQL_PORT" "$TABLE")
  start_trace "$NAME" "$WORK/$C/rest-status-trace.txt"
  http PUT "$REST/connectors/$NAME/config" "$config" >"$WORK/$C/rest-create.json"
  wait_for 60 "task 0 RUNNING" task_state_is RUNNING
  capture running
  # The auditor beside a pipeline already running (started before the connector, its first
  # polls would be 404s: "not observed" events of their own).
  RUST_LOG=info "$BIN" run -c "$WORK/$C/gap-auditor.toml" >"$WORK/$C/auditor.log" 2>&1 &
  AUDITOR_PID=$!
  wait_for 60 "auditor up" api /api/status "j['audits'][0]['audit']"
  wait_for 30 "the auditor read the connector" auditor_task_is RUNNING

  case $C in
    clean)
      produce "$TOPIC" 0 6
      wait_for 60 "rows 0-5 written" rows_are 6
      ;;
    fail)
      produce "$TOPIC" 0 2
      wait_for 60 "rows 0-1 written" rows_are 2
      wait_for 60 "commit 2 seen by the auditor" committed 2
      produce "$TOPIC" 2 1 2
      wait_for 60 "task 0 FAILED on the poison record" task_state_is FAILED
      capture failed
      wait_for 30 "the auditor saw the task FAILED" auditor_task_is FAILED
      produce "$TOPIC" 3 3
      # The operator skips the poison record the Kafka >= 3.6 way (KIP-875): stop the
      # connector, move its consumer group past the record, resume.
      log "operator: PUT /connectors/$NAME/stop"
      http PUT "$REST/connectors/$NAME/stop" >/dev/null
      wait_for 60 "connector STOPPED" connector_state_is STOPPED
      capture stopped
      http_get "$REST/connectors/$NAME/offsets" >"$WORK/$C/rest-offsets-before.json"
      log "operator: PATCH /connectors/$NAME/offsets to 3 (was $(cat "$WORK/$C/rest-offsets-before.json"))"
      http PATCH "$REST/connectors/$NAME/offsets" \
        "{\"offsets\": [{\"partition\": {\"kafka_topic\": \"$TOPIC\", \"kafka_partition\": 0}, \"offset\": {\"kafka_offset\": 3}}]}" \
        >"$WORK/$C/rest-offsets-patch.json"
      log "operator: PUT /connectors/$NAME/resume"
      http PUT "$REST/connectors/$NAME/resume" >/dev/null
      wait_for 60 "task 0 RUNNING again" task_state_is RUNNING
      capture resumed
      wait_for 60 "rows 0-1 and 3-5 written" rows_are 5
      ;;
    tolerate)
      # Records 0-1 committed first: a record dropped within the group's very first commit
      # has no commit step to be placed in (cause unknown, no evidence).
      produce "$TOPIC" 0 2
      wait_for 60 "rows 0-1 written" rows_are 2
      wait_for 60 "commit 2 seen by the auditor" committed 2
      produce "$TOPIC" 2 4 2
      wait_for 60 "rows 3-5 written" rows_are 5
      capture tolerated
      ;;
  esac
  wait_for 60 "commit 6 seen" committed 6
  wait_for 60 "settled at 6" settled_at 6
  stop_pid TRACE_PID
  local gaps status
  gaps=$(http_get "http://127.0.0.1:$AUDITOR_PORT/api/gaps?state=all")
  status=$(http_get "http://127.0.0.1:$AUDITOR_PORT/api/status")
  printf '%s\n' "$gaps" >"$WORK/$C/gaps.json"
  printf '%s\n' "$status" >"$WORK/$C/status.json"
  log "case $C: /api/gaps: $gaps"
  log "case $C: connect status: $(printf '%s' "$status" | json_of "json.dumps(j['audits'][0].get('connect'))")"
  stop_pid AUDITOR_PID
  http DELETE "$REST/connectors/$NAME" >/dev/null || true
  "$BIN" gaps -c "$WORK/$C/gap-auditor.toml" --state all | tee "$WORK/$C/gaps.txt" >&2
  python3 - "$C" "$WORK/$C/gaps.json" "$WORK/$C/status.json" "$NAME" <<'PY' || die "case $C: not what it must show (above)"
import json, re, sys
case, name = sys.argv[1], sys.argv[4]
g = json.load(open(sys.argv[2]))
c = json.load(open(sys.argv[3]))["audits"][0]["connect"]
assert c["state"] == "ok", c
if case == "clean":
    assert g == [], g
    assert c["events"] == [], c
    assert c["connector_state"] == "RUNNING", c
    assert [t["state"] for t in c["tasks"]] == ["RUNNING"], c
    assert c["errors_tolerance"] == "none" and c["dead_letter_queue"] is False, c
    sys.exit(0)
assert len(g) == 1, g
g = g[0]
assert (g["partition"], g["first_offset"], g["last_offset"], g["missing_records"]) == (0, 2, 2, 1), g
ev = g["evidence"] or ""
if case == "fail":
    assert g["cause"] == "skipped_by_restart", g
    assert re.search(rf"Kafka Connect task 0 of {re.escape(name)} FAILED at \S+Z \(", ev), ev
    # The root cause, not only the runtime's wrapper (the first line).
    assert "Exiting WorkerSinkTask due to unrecoverable exception.; caused by " \
        "org.apache.kafka.connect.errors.ConnectException: seed sink refuses the poison record" in ev, ev
    assert re.search(rf"Kafka Connect connector {re.escape(name)} STOPPED at \S+Z", ev), ev
    assert ev.endswith("the connector was STOPPED between the commits: its offsets then move only "
                       "through Connect's offsets API, a consumer group reset or its tasks' last "
                       "commit as they stopped"), ev
    # The resume follows the PATCH: named when a poll saw it within one poll of the step.
    print("case fail: the resume is", "named" if "RUNNING again" in ev else "not named (seen more than a poll after the step)", file=sys.stderr)
else:
    # The record skipped is the first after commit 2: the commit jumps 2 -> 6 from the gap,
    # which the ledger calls skipped_by_restart (a drop at the start of a batch looks like
    # a restart); the Connect evidence, seeing no restart, names the tolerance.
    assert g["cause"] == "skipped_by_restart", g
    assert c["errors_tolerance"] == "all" and c["dead_letter_queue"] is False, c
    assert ev == (f"Kafka Connect connector {name} skips records it cannot convert or "
                  "transform (errors.tolerance=all) and has no dead-letter queue"), ev
PY
  if [[ $C != clean ]]; then
    grep -qE 'Kafka Connect .*: offset 2 (skipped|missing)$' "$WORK/$C/gaps.txt" || die "case $C: \`gaps\` does not print the evidence line"
  fi
  log "case $C: OK in $(($(date +%s) - t0)) s"
}

case ${1:-all} in
  clean | fail | tolerate) start_worker && run_case "$1" ;;
  all) start_worker && run_case clean && run_case fail && run_case tolerate ;;
  *) die "usage: $0 [clean|fail|tolerate|all]" ;;
esac
log "all cases OK (worker up in ${WORKER_STARTED_S}s; work files: $WORK)"
