# shellcheck shell=bash
# Sourced by .ci/run: the third-party MCP servers (npm: server-everything, server-filesystem,
# server-memory; PyPI: mcp-server-time) and the official Python MCP SDK, pinned, in target/mcp-servers
# (scripts/mcp-servers.sh). plansmith-mcp's and the CLI's MCP tests read the exported
# PLANSMITH_TEST_MCP_* variables; under CI=true they fail when one is missing.
eval "$(bash scripts/mcp-servers.sh)"
echo "ci: mcp servers: $PLANSMITH_TEST_MCP_EVERYTHING, $PLANSMITH_TEST_MCP_FILESYSTEM, $PLANSMITH_TEST_MCP_MEMORY, $PLANSMITH_TEST_MCP_TIME"
