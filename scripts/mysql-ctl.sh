#!/usr/bin/env bash
# Stops or restarts the test MariaDB started by test-env.sh, to simulate a sink outage.
#   scripts/mysql-ctl.sh stop|start|status
# Reads everything from the env file ($GAP_AUDITOR_TEST_RUN or $GAP_AUDITOR_RUN, default
# /tmp/gap-auditor-test), so a test needs no other setting. `start` returns once MariaDB
# accepts connections again, on the same datadir and port, and updates the pid in the file.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
. "$HERE/lib.sh"

RUN=${GAP_AUDITOR_TEST_RUN:-${GAP_AUDITOR_RUN:-/tmp/gap-auditor-test}}
[[ -f $RUN/env ]] || die "$RUN/env not found: run scripts/test-env.sh start first"
# shellcheck source=/dev/null
. "$RUN/env"

case ${1:-} in
  stop)
    stop_pidfile "$RUN/mariadbd.pid"
    ;;
  start)
    start_mysqld
    GAP_AUDITOR_TEST_MYSQLD_PID=$(cat "$RUN/mariadbd.pid")
    write_env
    ;;
  status)
    if pidfile_alive "$RUN/mariadbd.pid" && mysql_ready; then echo up; else echo down; exit 1; fi
    ;;
  *) die "usage: $0 stop|start|status" ;;
esac
