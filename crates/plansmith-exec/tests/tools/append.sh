#!/bin/sh
# Test tool with a side effect: appends "start STEP KEY" to the file $1, sleeps $2 seconds
# (default 0), then appends "done STEP KEY" unless a line with that idempotency key is there
# already (it honours the key, as a real side-effecting tool should). A `TAG` environment
# variable (e.g. the node) goes into both lines, before the key.
cat >/dev/null
echo "start $PLANSMITH_STEP_ID ${TAG:-} $PLANSMITH_IDEMPOTENCY_KEY" >>"$1"
sleep "${2:-0}"
if ! grep -q "^done .* $PLANSMITH_IDEMPOTENCY_KEY\$" "$1"; then
  echo "done $PLANSMITH_STEP_ID ${TAG:-} $PLANSMITH_IDEMPOTENCY_KEY" >>"$1"
fi
printf '{"appended": "%s"}\n' "$PLANSMITH_STEP_ID"
