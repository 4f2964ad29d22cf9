#!/usr/bin/env bash
# Compares two plansmith builds under the load test's request by alternating them (a bench, not
# a test): this machine's level drifts by ±15 % within minutes, so one run of each says little.
# Each run is `wrk` at 64 connections for SECONDS against a fresh store (a new SQLite file, or a
# new PostgreSQL database when PLANSMITH_TEST_POSTGRES_URL is set); prints plans/s and p99.
#
#   scripts/load-alternate.sh OLD_BIN NEW_BIN [ROUNDS] [SECONDS]    # default 3 rounds of 10 s
#
# Build the old one in a worktree with its own target directory, for example:
#   git worktree add /tmp/old COMMIT && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target \
#     cargo build --release -p plansmith --no-default-features)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 OLD_BIN NEW_BIN [ROUNDS] [SECONDS]" >&2; exit 2; }
old=$1 new=$2 rounds=${3:-3} secs=${4:-10}
command -v wrk >/dev/null || { echo "load-alternate: needs wrk (apt-get install wrk)" >&2; exit 2; }
body='{"query": "Email Bob the weather in Paris"}'
work=$(mktemp -d "${TMPDIR:-/tmp}/plansmith-alt.XXXXXX")
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\n' \
  "'$body'" >"$work/post.lua"
addr=127.0.0.1:18296

# one NAME BIN: a fresh store, the server, one wrk run; prints "NAME plans/s p99".
one() {
  local name=$1 bin=$2 store db=""
  if [ -n "${PLANSMITH_TEST_POSTGRES_URL:-}" ]; then
    db="plansmith_alt_$$_$RANDOM"
    psql -q "$PLANSMITH_TEST_POSTGRES_URL" -c "CREATE DATABASE $db" >/dev/null
    store="${PLANSMITH_TEST_POSTGRES_URL%/*}/$db"
  else
    rm -f "$work"/plans.db*
    store="sqlite:$work/plans.db"
  fi
  PLANSMITH_TOKENS= PLANSMITH_RATE_LIMIT= "$bin" serve --addr "$addr" --tools examples/tools.json \
    --model scripted:examples/replies/weather-email-repeat.json --store "$store" 2>"$work/$name.log" &
  pid=$!
  for _ in $(seq 150); do curl -s -o /dev/null "http://$addr/healthz" && break; sleep 0.2; done
  curl -sf -o /dev/null -XPOST "http://$addr/v1/plans" -H 'content-type: application/json' -d "$body"
  wrk -t2 -c64 -d"${secs}s" --latency -s "$work/post.lua" "http://$addr/v1/plans" >"$work/out"
  printf '%-4s %10s plans/s   p99 %s\n' "$name" \
    "$(awk '/Requests\/sec/ {printf "%.0f", $2}' "$work/out")" "$(awk '$1 == "99%" {print $2}' "$work/out")"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  if [ -n "$db" ]; then
    psql -q "$PLANSMITH_TEST_POSTGRES_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
  fi
}

for _ in $(seq "$rounds"); do
  one old "$old"
  one new "$new"
done
