# shellcheck shell=bash
# Sourced by .ci/run: the official AG-UI TypeScript client (npm @ag-ui/client), pinned, in
# target/agui-client (scripts/agui-client.sh). The CLI's AG-UI test reads the exported
# PLANSMITH_TEST_AGUI; under CI=true it fails when it is missing.
eval "$(bash scripts/agui-client.sh)"
echo "ci: AG-UI client: $PLANSMITH_TEST_AGUI"
