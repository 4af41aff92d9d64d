#!/usr/bin/env bash
# Runs tests/browser/ui.mjs (the gap page in headless Chromium) with playwright-core,
# installed pinned into $GAP_AUDITOR_CACHE/npm-browser (default ~/.cache/gap-auditor/)
# only when missing. Needs node, npm and Debian's chromium (scripts/test-env.sh installs
# them). The environment (UI_URL, UI_TOKEN, UI_GAP, UI_OUT) is passed through; see the .mjs.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
. "$HERE/lib.sh"

CACHE=${GAP_AUDITOR_CACHE:-$HOME/.cache/gap-auditor}
NPM_DIR=$CACHE/npm-browser
PLAYWRIGHT_VERSION=1.65.2

command -v node >/dev/null && command -v npm >/dev/null \
  || die "node and npm are needed (Debian packages nodejs npm; scripts/test-env.sh installs them)"
CHROMIUM=${CHROMIUM:-$(command -v chromium || true)}
[[ -n $CHROMIUM ]] || die "chromium is needed (Debian package chromium; scripts/test-env.sh installs it)"
export CHROMIUM

pkg=$NPM_DIR/node_modules/playwright-core/package.json
if [[ ! -f $pkg || $(node -p "require('$pkg').version") != "$PLAYWRIGHT_VERSION" ]]; then
  log "installing playwright-core@$PLAYWRIGHT_VERSION into $NPM_DIR (npm; no browser download: Debian's chromium is used)"
  mkdir -p "$NPM_DIR"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$NPM_DIR" --no-save --no-audit \
    --no-fund --no-package-lock --loglevel=error "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null
fi
# ES modules resolve bare imports from the importing file's directory upwards, not from
# NODE_PATH: run a copy placed beside the cached node_modules.
WORK=$(mktemp -d "$NPM_DIR/run.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cp "$(dirname "$HERE")/tests/browser/ui.mjs" "$WORK/ui.mjs"
node "$WORK/ui.mjs"
