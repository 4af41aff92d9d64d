#!/usr/bin/env bash
# Stops or restarts the test search server (OpenSearch, answering the Elasticsearch API)
# started by test-env.sh, to simulate a sink outage.
#   scripts/es-ctl.sh stop|start|status
# Reads everything from the env file ($GAP_AUDITOR_TEST_RUN or $GAP_AUDITOR_RUN, default
# /tmp/gap-auditor-test), so a test needs no other setting. `start` returns once the server
# answers again, on the same data dir and port, and updates the pid in the env file.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
. "$HERE/lib.sh"

RUN=${GAP_AUDITOR_TEST_RUN:-${GAP_AUDITOR_RUN:-/tmp/gap-auditor-test}}
[[ -f $RUN/env ]] || die "$RUN/env not found: run scripts/test-env.sh start first"
# shellcheck source=/dev/null
. "$RUN/env"
[[ -n ${GAP_AUDITOR_TEST_ES_CMD:-} ]] || die "$RUN/env has no Elasticsearch server: run scripts/test-env.sh start"

case ${1:-} in
  stop)
    stop_pidfile "$RUN/java@opensearch.pid"
    ;;
  start)
    start_opensearch
    GAP_AUDITOR_TEST_ES_PID=$(cat "$RUN/java@opensearch.pid")
    write_env
    ;;
  status)
    if pidfile_alive "$RUN/java@opensearch.pid" && es_ready; then echo up; else echo down; exit 1; fi
    ;;
  *) die "usage: $0 stop|start|status" ;;
esac
