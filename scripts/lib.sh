# shellcheck shell=bash
# Helpers shared by test-env.sh and mysql-ctl.sh (sourced, not run).

# Servers run as root from scripts that may be started by a non-login shell.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

log() { printf '[test-env] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# bash's /dev/tcp avoids needing nc/ss on a fresh machine.
port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# pid_alive PID [NAME]: a pid file can outlive its process (CI ends what a session left
# running, the machine may reboot) and the pid be reused, so the name must match too.
# A zombie (kill -0 still works on it) counts as dead.
pid_alive() {
  local pid=${1:-} name=${2:-} stat comm
  [[ -n $pid ]] && stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  comm=${stat#* (} && comm=${comm%) *}
  [[ ${stat##*) } != Z* && (-z $name || $comm == "$name") ]]
}

# The process name is the pid file's name up to an `@`: tansu.pid, mariadbd.pid,
# mariadbd@tls.pid (a second mariadbd).
pid_name() { local n; n=$(basename "$1" .pid); echo "${n%%@*}"; }
pidfile_alive() { [[ -s $1 ]] && pid_alive "$(cat "$1")" "$(pid_name "$1")"; }

# Run a daemon detached (own session, no inherited fds) so it outlives the caller and a
# test that captures our output does not hang on an open pipe. Writes its pid to $1.
spawn() {
  local pidfile=$1 logfile=$2; shift 2
  setsid "$@" </dev/null >>"$logfile" 2>&1 &
  echo $! >"$pidfile"
}

# wait_until SECONDS PIDFILE LOGFILE CMD...: poll CMD, failing early if the daemon died.
wait_until() {
  local secs=$1 pidfile=$2 logfile=$3; shift 3
  local deadline=$((SECONDS + secs))
  until "$@"; do
    # No name check: until setsid and bash exec the daemon, its name is theirs.
    if ! pid_alive "$(cat "$pidfile")"; then
      tail -n 30 "$logfile" >&2 || true
      die "process from $pidfile exited during startup (log: $logfile)"
    fi
    ((SECONDS < deadline)) || { tail -n 30 "$logfile" >&2 || true; die "timed out waiting for: $*"; }
    sleep 0.2
  done
}

# SIGTERM, then wait for a clean exit (MariaDB flushes InnoDB); SIGKILL only as a last resort.
stop_pidfile() {
  local pidfile=$1 name pid
  name=$(pid_name "$pidfile")
  [[ -s $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  if pid_alive "$pid" "$name"; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 60))
    while pid_alive "$pid" "$name"; do
      if ((SECONDS >= deadline)); then
        log "$name did not exit in 60 s, killing"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
        break
      fi
      sleep 0.1
    done
  fi
  rm -f "$pidfile"
}

# Accepting connections, not just listening: InnoDB recovery happens before this answers.
mysql_ready() {
  mariadb-admin --no-defaults --socket="$GAP_AUDITOR_TEST_MYSQL_SOCKET" -uroot \
    --connect-timeout=1 ping >/dev/null 2>&1 && port_open "$GAP_AUDITOR_TEST_MYSQL_PORT"
}

ENV_VARS=(
  GAP_AUDITOR_TEST_RUN GAP_AUDITOR_TEST_KAFKA GAP_AUDITOR_TEST_KAFKA_PID GAP_AUDITOR_TEST_KAFKA_CLASSPATH
  GAP_AUDITOR_TEST_KAFKA_LOG_DIR GAP_AUDITOR_TEST_KAFKA_SASL GAP_AUDITOR_TEST_KAFKA_SSL
  GAP_AUDITOR_TEST_KAFKA_SCRAM_USER GAP_AUDITOR_TEST_KAFKA_SCRAM_PASSWORD GAP_AUDITOR_TEST_TANSU
  GAP_AUDITOR_TEST_MYSQL GAP_AUDITOR_TEST_MYSQL_PORT GAP_AUDITOR_TEST_MYSQL_SOCKET
  GAP_AUDITOR_TEST_MYSQLD_PID GAP_AUDITOR_TEST_MYSQL_CMD GAP_AUDITOR_TEST_MYSQL_CTL
  GAP_AUDITOR_TEST_ES GAP_AUDITOR_TEST_ES_PORT GAP_AUDITOR_TEST_ES_PID GAP_AUDITOR_TEST_ES_CMD
  GAP_AUDITOR_TEST_ES_CTL GAP_AUDITOR_TEST_SR_PYTHON GAP_AUDITOR_TEST_MYSQL_TLS GAP_AUDITOR_TEST_MYSQL_TLS_SOCKET
  GAP_AUDITOR_TEST_MYSQL_TLS_PID GAP_AUDITOR_TEST_TLS_CA GAP_AUDITOR_TEST_TLS_OTHER_CA
  GAP_AUDITOR_TEST_TLS_CLIENT_P12 GAP_AUDITOR_TEST_TLS_CLIENT_P12_PASSWORD
  GAP_AUDITOR_TEST_TLS_SERVER_P12
)

# Written whole to a temp file then renamed, so a test never sources a half-written file.
write_env() {
  local file=$GAP_AUDITOR_TEST_RUN/env v
  # `-`: an env file written before a service existed lacks its variables.
  for v in "${ENV_VARS[@]}"; do printf 'export %s=%q\n' "$v" "${!v-}"; done >"$file.tmp"
  mv -f "$file.tmp" "$file"
}

# Starts mariadbd from the recorded command line unless it runs; returns once it serves.
start_mysqld() {
  local run=$GAP_AUDITOR_TEST_RUN port=$GAP_AUDITOR_TEST_MYSQL_PORT
  if ! pidfile_alive "$run/mariadbd.pid"; then
    port_open "$port" && die "port $port is taken by a process we did not start"
    log "starting mariadbd on 127.0.0.1:$port"
    spawn "$run/mariadbd.pid" "$run/mariadb.log" bash -c "exec $GAP_AUDITOR_TEST_MYSQL_CMD"
  fi
  wait_until 60 "$run/mariadbd.pid" "$run/mariadb.log" mysql_ready
}

# The search server answers with its shards allocated: OpenSearch listens before it has
# recovered its indices, and a request in between gets a 503.
es_ready() {
  timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$GAP_AUDITOR_TEST_ES_PORT && printf 'GET /_cluster/health?wait_for_status=yellow&timeout=2s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3 && grep -qE '\"status\":\"(yellow|green)\"' <&3" 2>/dev/null
}

# Starts OpenSearch from the recorded command line unless it runs; returns once it
# answers. Its data dir survives restarts. The pid file is java@opensearch.pid: `exec` makes
# the pid the JVM's, whose process name is java.
start_opensearch() {
  local run=$GAP_AUDITOR_TEST_RUN port=$GAP_AUDITOR_TEST_ES_PORT
  if ! pidfile_alive "$run/java@opensearch.pid"; then
    port_open "$port" && die "port $port is taken by a process we did not start"
    log "starting OpenSearch on 127.0.0.1:$port"
    mkdir -p "$run/opensearch"
    spawn "$run/java@opensearch.pid" "$run/opensearch.log" bash -c "exec $GAP_AUDITOR_TEST_ES_CMD"
  fi
  wait_until 90 "$run/java@opensearch.pid" "$run/opensearch.log" es_ready
}
