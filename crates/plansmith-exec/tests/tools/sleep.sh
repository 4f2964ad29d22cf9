#!/bin/sh
# Test tool: sleeps $1 seconds (default 0.2), then answers {"slept": $1}.
cat >/dev/null
sleep "${1:-0.2}"
printf '{"slept": %s}\n' "${1:-0.2}"
