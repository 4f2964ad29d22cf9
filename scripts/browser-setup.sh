#!/usr/bin/env bash
# Installs what the review-page browser test needs: Debian's chromium (apt) and a pinned
# playwright-core and axe-core (npm) in a project-local directory. Prints the env vars to export.
# Usage: scripts/browser-setup.sh   (then: eval "$(scripts/browser-setup.sh --env)")
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$ROOT/target/browser"
if [ "${1:-}" != "--env" ]; then
  if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  fi
  # axe-core audits the page for accessibility (injected by scripts/review-page-browser.mjs).
  if [ ! -d "$DIR/node_modules/playwright-core" ] || [ ! -f "$DIR/node_modules/axe-core/axe.min.js" ]; then
    mkdir -p "$DIR"
    [ -f "$DIR/package.json" ] || (cd "$DIR" && npm init -y >/dev/null)
    (cd "$DIR" && npm install --silent --no-audit --no-fund playwright-core@1.49.1 axe-core@4.11.0 >/dev/null)
  fi
fi
echo "export PLANSMITH_TEST_CHROMIUM=$(command -v chromium || echo /usr/bin/chromium)"
echo "export PLANSMITH_TEST_PLAYWRIGHT=$DIR/node_modules/playwright-core"
