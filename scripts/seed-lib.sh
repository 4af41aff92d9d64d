# Shared by the opt-in real-pipeline seeds (scripts/flink-seed.sh, scripts/connect-seed.sh):
# the seed's topic, table, records and auditor config, and the small helpers both drive
# them with. Sourced, never run; the sourcing script sets SEED (its name in log lines),
# AUDITOR_PORT, and has sourced the test env (scripts/test-env.sh start).

log() { printf '[%s %s] %s\n' "$SEED" "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

kafka_java() { java -Xmx128m -cp "$GAP_AUDITOR_TEST_KAFKA_CLASSPATH" "$@"; }
sql() { mysql -h 127.0.0.1 -P "$GAP_AUDITOR_TEST_MYSQL_PORT" -u gap -pgap gap_auditor_test -N -e "$1"; }
# METHOD URL [BODY]: the body answered; fails (body on stderr) on an HTTP error or no answer.
http() {
  python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
method, url = sys.argv[1], sys.argv[2]
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print(r.read().decode())
except urllib.error.HTTPError as e:
    sys.stderr.write(f"HTTP {e.code}: {e.read().decode()}\n")
    sys.exit(1)
except (urllib.error.URLError, OSError) as e:
    sys.stderr.write(f"{e}\n")
    sys.exit(1)
PY
}
http_get() { http GET "$1"; }
# A JSON answer read with a Python expression over `j`.
json_of() { python3 -c "import json, sys; j = json.load(sys.stdin); print($1)"; }
# The auditor's HTTP API, read the same way.
api() { http_get "http://127.0.0.1:$AUDITOR_PORT$1" | json_of "$2"; }

# The seed's records: the dns_logs csv of the README, one per offset; the value at offset
# `poison` (if given) carries the word POISON in its domain (still 9 fields: the auditor
# expects it like any other).
produce() { # topic first count [poison]
  local topic=$1 first=$2 n=$3 poison=${4:--1} i host
  for ((i = first; i < first + n; i++)); do
    host=host$i
    ((i == poison)) && host=POISON$i
    printf '10.0.0.%d|%s.example.com|2026-12-06 02:%02d:00|93.184.216.34|NOERROR|A|-|-|8.8.8.8\n' "$i" "$host" "$i"
  done | kafka_java org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$GAP_AUDITOR_TEST_KAFKA" \
    --topic "$topic" --producer-property acks=all >/dev/null
}

wait_for() { # seconds what command...
  local secs=$1 what=$2 t=0
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((t++ < secs)) || die "timed out after ${secs}s waiting for: $what"
    sleep 1
  done
  log "$what (${t}s)"
}

rows() { sql "SELECT COUNT(*) FROM \`$TABLE\`"; }
rows_are() { [[ $(rows) -eq $1 ]]; }
settled_at() { [[ $(api /api/status "j['audits'][0]['partitions'][0]['settled']") -eq $1 ]]; }
committed() { [[ $(api /api/status "j['audits'][0]['partitions'][0]['pipeline_committed'] or -1") -ge $1 ]]; }

# The case's topic (one partition) and table (the sink writes each record's partition and
# offset: the offset_columns strategy), and the auditor's config in DIR/gap-auditor.toml:
# pipeline group GROUP, its [audits.pipeline] section's keys PIPELINE (the evidence source).
seed_case() { # dir suffix group pipeline-keys
  local dir=$1 suffix=$2 group=$3 pipeline=$4
  kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "$GAP_AUDITOR_TEST_KAFKA" \
    --create --topic "$TOPIC" --partitions 1 --replication-factor 1 >/dev/null
  sql "CREATE TABLE \`$TABLE\` (\`partition\` INT NOT NULL, \`offset\` BIGINT NOT NULL,
       client_ip VARCHAR(64), domain VARCHAR(255), \`time\` VARCHAR(32),
       PRIMARY KEY (\`partition\`, \`offset\`))"
  cat >"$dir/gap-auditor.toml" <<TOML
[kafka]
brokers = "$GAP_AUDITOR_TEST_KAFKA"
group_id = "gap-auditor-$suffix"
start = "earliest"
[server]
listen = "127.0.0.1:$AUDITOR_PORT"
[state]
path = "$dir/state"
[[audits]]
name = "dns_logs"
topics = ["$TOPIC"]
pipeline_group = "$group"
grace = "5s"
verify_interval = "1s"
[audits.record]
format = "csv"
delimiter = "|"
fields = ["client_ip","domain","time","target_ip","rcode","query_type","authority_record","add_msg","dns_ip"]
[audits.record.filter]
field_count = 9
[audits.match]
strategy = "offset_columns"
partition_column = "partition"
offset_column = "offset"
[audits.sink]
kind = "mysql"
url = "mysql://gap:gap@127.0.0.1:$GAP_AUDITOR_TEST_MYSQL_PORT/gap_auditor_test"
table = "$TABLE"
[audits.pipeline]
$pipeline
TOML
}
