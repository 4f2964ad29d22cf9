#!/usr/bin/env bash
# Two `plansmith serve` processes on one PostgreSQL store serve the same plans consistently.
# Usage: scripts/two-serves-postgres.sh POSTGRES_URL   (needs target/debug/plansmith, built with
# `cargo build -p plansmith --no-default-features`). Use a fresh database to exercise the
# concurrent first migration (`--fresh` creates one on the server of POSTGRES_URL with psql).
set -euo pipefail
URL="$1"; BIN="${PLANSMITH_BIN:-target/debug/plansmith}"
if [ "${2:-}" = --fresh ]; then
  db="plansmith_two_$$_$(date +%s)"
  psql -q "$URL" -c "CREATE DATABASE $db" >/dev/null
  URL="${URL%/*}/$db"
fi
A=127.0.0.1:18181; B=127.0.0.1:18182
common=(--tools examples/tools.json --model scripted:examples/replies/weather-email.json --store "$URL")
LOG=$(mktemp -d)
# Both start at the same moment on a possibly fresh database: the store migrates under a
# PostgreSQL advisory lock, so neither trips over the other's CREATE TABLE (a simultaneous start
# once failed before that lock).
"$BIN" serve --addr $A "${common[@]}" 2>"$LOG/a.log" & PA=$!
"$BIN" serve --addr $B "${common[@]}" 2>"$LOG/b.log" & PB=$!
trap 'kill $PA $PB 2>/dev/null; cat "$LOG"/*.log' EXIT
for addr in $A $B; do
  for _ in $(seq 150); do curl -sf http://$addr/healthz >/dev/null && break; sleep 0.2; done
  curl -sf http://$addr/healthz >/dev/null || { echo "serve on $addr did not start"; exit 1; }
done
ID=$(curl -sf -XPOST http://$A/v1/plans -H 'content-type: application/json' \
  -d '{"query":"Email Bob the weather in Paris"}' | python3 -c 'import json,sys;print(json.load(sys.stdin)["stored"]["plan"]["id"])')
curl -sf http://$B/v1/plans/$ID | python3 -c 'import json,sys;d=json.load(sys.stdin);assert d["state"]=="awaiting_review",d'
curl -sf -XPOST http://$B/v1/plans/$ID/feedback -H 'content-type: application/json' -d '{"action":"accept"}' >/dev/null
curl -sf -XPATCH http://$B/v1/plans/$ID/steps/s1 -H 'content-type: application/json' -d '{"status":"completed"}' >/dev/null
curl -sf http://$A/v1/plans/$ID | python3 -c 'import json,sys;d=json.load(sys.stdin);assert d["state"]=="accepted" and d["plan"]["version"]==3 and d["plan"]["steps"][0]["status"]=="completed",d'
# a stale write through A is refused: B already wrote version 3
code=$(curl -s -o /dev/null -w '%{http_code}' -XPATCH http://$A/v1/plans/$ID/steps/s2 -H 'content-type: application/json' -d '{"status":"completed","expected_version":2}')
[ "$code" = 409 ] || { echo "stale write answered $code, want 409"; exit 1; }
curl -sf http://$A/v1/plans/$ID/history | python3 -c 'import json,sys;v=json.load(sys.stdin)["versions"];assert [x["trigger"] for x in v]==["created","status","step_update"],v'
echo "two serves on one PostgreSQL: OK ($ID)"
