#!/usr/bin/env bash
# A real single-node OpenSearch 2.19.6 (HTTP through the netty4 plugin) from Maven Central
# jars, for the integration tests' Elasticsearch-API sink.
#   run.sh install CACHE_DIR          resolve the jars and compile the launcher into
#                                     CACHE_DIR/opensearch-2.19.6/ (a no-op when it is there)
#   run.sh cmd CACHE_DIR PORT HOME    print, on one line, the java command that starts the
#                                     node on 127.0.0.1:PORT with its data under HOME
# The started node prints `opensearch ready on 127.0.0.1:PORT` on stdout once it answers
# (logs go to stderr), and closes cleanly on SIGTERM; its data survives a restart on HOME.
# Needs java 17 (OPENSEARCH_JAVA overrides `java` on PATH), javac and mvn.
set -euo pipefail

VERSION=2.19.6
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$HERE/src/main/java/gapauditor/opensearch/OpenSearchLauncher.java
MAIN=gapauditor.opensearch.OpenSearchLauncher

die() { echo "run.sh: $*" >&2; exit 1; }

dest() { # CACHE_DIR -> absolute install dir
  mkdir -p "$1"
  echo "$(cd "$1" && pwd)/opensearch-$VERSION"
}

# What the install was made from: a changed pom or launcher makes the next install redo it.
stamp() {
  echo "opensearch $VERSION"
  (cd "$HERE" && sha256sum pom.xml "${SRC#"$HERE"/}")
}

install() {
  local d tmp out
  d=$(dest "$1")
  if [[ -f $d/installed ]] && [[ $(cat "$d/installed") == "$(stamp)" ]]; then
    return 0
  fi
  # built aside and moved in whole, so an interrupted install never looks complete
  tmp=$d.tmp.$$
  rm -rf "$tmp"
  mkdir -p "$tmp"
  trap "rm -rf $(printf '%q' "$tmp")" EXIT
  # mvn -q still writes terminal resets to stdout: show its output only when it fails
  out=$(mvn -B -q -f "$HERE/pom.xml" dependency:copy-dependencies -DoutputDirectory="$tmp/lib" 2>&1) \
    || { printf '%s\n' "$out" >&2; die "resolving the OpenSearch jars failed"; }
  javac --release 17 -nowarn -cp "$tmp/lib/*" -d "$tmp/classes" "$SRC" \
    || die "compiling the launcher failed"
  stamp > "$tmp/installed"
  rm -rf "$d"
  mv "$tmp" "$d"
  trap - EXIT
}

cmd() {
  local d java
  d=$(dest "$1")
  [[ -f $d/installed ]] || die "$d is not installed: run '$0 install $1' first"
  [[ $2 =~ ^[0-9]+$ ]] || die "PORT must be a number: $2"
  java=$(command -v "${OPENSEARCH_JAVA:-java}") || die "no java on PATH"
  local args=(
    "$java"
    # 256m is enough for a few test indices; 768m leaves the real-memory circuit breaker
    # (95% of heap) room under bulk load
    -Xms256m -Xmx768m
    # the distribution's jvm.options: date/locale formats as OpenSearch expects them
    -Djava.locale.providers=SPI,COMPAT
    -Dfile.encoding=UTF-8
    # the launcher closes the node in its own shutdown hook and logs while doing so
    -Dlog4j.shutdownHookEnabled=false
    -Dlog4j2.disable.jmx=true
    -Djna.nosys=true
    -Dio.netty.noUnsafe=true
    -Dio.netty.noKeySetOptimization=true
    -Dio.netty.recycler.maxCapacityPerThread=0
    -cp "$d/classes:$d/lib/*"
    "$MAIN" "$2" "$3"
  )
  # shell-quoted, so `eval "exec $(run.sh cmd ...)"` gets exactly these words
  local line
  printf -v line '%q ' "${args[@]}"
  echo "${line% }"
}

case ${1:-} in
  install) [[ $# -eq 2 ]] || die "usage: $0 install CACHE_DIR"; install "$2" ;;
  cmd) [[ $# -eq 4 ]] || die "usage: $0 cmd CACHE_DIR PORT HOME"; cmd "$2" "$3" "$4" ;;
  *) die "usage: $0 install CACHE_DIR | cmd CACHE_DIR PORT HOME" ;;
esac
