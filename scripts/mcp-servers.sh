#!/usr/bin/env bash
# Installs the third-party MCP servers and the MCP client that plansmith-mcp's integration tests
# run against (none of them written by us), pinned, into a project-local directory:
#
# - npm: @modelcontextprotocol/server-everything, server-filesystem and server-memory (the
#   protocol's reference servers; the memory server's read-only `search_nodes` investigates);
# - PyPI, in one virtual environment: mcp-server-time (reference server) and the official Python
#   MCP SDK `mcp` (its client drives `plansmith mcp` over stdio and streamable HTTP).
#
#   scripts/mcp-servers.sh           # install (idempotent), then print the env vars to export
#   eval "$(scripts/mcp-servers.sh)"
#
# Output: $PLANSMITH_TOOLS_DIR/mcp-servers (default target/mcp-servers). Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

everything=2026.8.31
filesystem=2026.8.31
memory=2026.8.31
time_server=2026.10.19
python_sdk=2.3.0

root=${PLANSMITH_TOOLS_DIR:-$PWD/target}/mcp-servers
node_dir="$root/node"
venv="$root/venv"
stamp="$root/installed-$everything-$filesystem-$memory-$time_server-$python_sdk"

if [ ! -e "$stamp" ]; then
  rm -rf "$root"
  mkdir -p "$node_dir"
  echo "mcp-servers: npm install (server-everything@$everything, server-filesystem@$filesystem," \
    "server-memory@$memory)" >&2
  (cd "$node_dir" && npm init -y >/dev/null &&
    npm install --silent --no-audit --no-fund --save-exact \
      "@modelcontextprotocol/server-everything@$everything" \
      "@modelcontextprotocol/server-filesystem@$filesystem" \
      "@modelcontextprotocol/server-memory@$memory" >&2)
  python="${PLANSMITH_PYTHON:-python3}"
  echo "mcp-servers: pip install (mcp-server-time==$time_server, mcp==$python_sdk)" >&2
  "$python" -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "mcp-server-time==$time_server" "mcp==$python_sdk" >&2
  "$venv/bin/python" -c "import mcp, mcp_server_time" >&2
  touch "$stamp"
fi

bin="$node_dir/node_modules/.bin"
echo "export PLANSMITH_TEST_MCP_EVERYTHING=$bin/mcp-server-everything"
echo "export PLANSMITH_TEST_MCP_FILESYSTEM=$bin/mcp-server-filesystem"
echo "export PLANSMITH_TEST_MCP_MEMORY=$bin/mcp-server-memory"
echo "export PLANSMITH_TEST_MCP_TIME=$venv/bin/mcp-server-time"
echo "export PLANSMITH_TEST_MCP_PYTHON=$venv/bin/python"
