#!/bin/sh
# Test tool: fails the first $2 calls (counted in the file $1), then answers {"calls": n}.
cat >/dev/null
n=$(cat "$1" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" >"$1"
if [ "$n" -le "$2" ]; then
  echo "flaky failure $n" >&2
  exit 1
fi
printf '{"calls": %d}\n' "$n"
