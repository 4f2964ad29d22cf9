#!/usr/bin/env bash
# Installs the official AG-UI TypeScript client (npm @ag-ui/client, pinned) that the AG-UI
# tests drive plansmith's `/v1/plans/{id}/events` with, into a project-local directory, then
# prints the variable the tests read:
#
#   eval "$(scripts/agui-client.sh)"
#
# Output: $PLANSMITH_TOOLS_DIR/agui-client (default target/agui-client). Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

client=1.0.0

root=${PLANSMITH_TOOLS_DIR:-$PWD/target}/agui-client
stamp="$root/installed-$client"

if [ ! -e "$stamp" ]; then
  rm -rf "$root"
  mkdir -p "$root"
  echo "agui-client: npm install (@ag-ui/client@$client)" >&2
  (cd "$root" && npm init -y >/dev/null &&
    npm install --silent --no-audit --no-fund --save-exact "@ag-ui/client@$client" >&2)
  touch "$stamp"
fi

echo "export PLANSMITH_TEST_AGUI=$root"
