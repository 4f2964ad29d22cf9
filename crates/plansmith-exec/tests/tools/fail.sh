#!/bin/sh
# Test tool: always fails (exit 3, $1 on stderr); appends each call's idempotency key to $2
# when given.
cat >/dev/null
if [ -n "$2" ]; then echo "$PLANSMITH_IDEMPOTENCY_KEY" >>"$2"; fi
echo "${1:-boom}" >&2
exit 3
