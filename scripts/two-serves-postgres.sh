#!/usr/bin/env bash
# Two `plansmith serve` processes on one PostgreSQL store serve the same plans consistently, and
# a page watching a plan's events through either sees the changes made through the other.
# Usage: scripts/two-serves-postgres.sh POSTGRES_URL   (needs target/debug/plansmith, built with
# `cargo build -p plansmith --no-default-features`, or PLANSMITH_BIN; PORT_A and PORT_B override
# the ports 18181 and 18182). Run by the test `serve::two_serves_share_plans_and_events_on_postgres`. Use a fresh database to exercise the
# concurrent first migration (`--fresh` creates one on the server of POSTGRES_URL with psql).
set -euo pipefail
URL="$1"; BIN="${PLANSMITH_BIN:-target/debug/plansmith}"
if [ "${2:-}" = --fresh ]; then
  db="plansmith_two_$$_$(date +%s)"
  psql -q "$URL" -c "CREATE DATABASE $db" >/dev/null
  URL="${URL%/*}/$db"
fi
A=127.0.0.1:${PORT_A:-18181}; B=127.0.0.1:${PORT_B:-18182}
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
# A page watching the plan through each process.
curl -sN http://$A/v1/plans/$ID/events >"$LOG/events-a.txt" & EA=$!
curl -sN http://$B/v1/plans/$ID/events >"$LOG/events-b.txt" & EB=$!
trap 'kill $PA $PB $EA $EB 2>/dev/null; cat "$LOG"/*.log' EXIT
# wait_for FILE TEXT: until FILE holds TEXT (10 s at most)
wait_for() {
  for _ in $(seq 100); do grep -q "$2" "$1" && return 0; sleep 0.1; done
  echo "no '$2' in $1 within 10 s:"; cat "$1"; exit 1
}
wait_for "$LOG/events-a.txt" 'event: snapshot'; wait_for "$LOG/events-b.txt" 'event: snapshot'
curl -sf http://$B/v1/plans/$ID | python3 -c 'import json,sys;d=json.load(sys.stdin);assert d["state"]=="awaiting_review",d'
# Accepted through B, a step marked through A: both pages see both changes.
curl -sf -XPOST http://$B/v1/plans/$ID/feedback -H 'content-type: application/json' -d '{"action":"accept"}' >/dev/null
wait_for "$LOG/events-a.txt" 'event: plan_updated'
curl -sf -XPATCH http://$A/v1/plans/$ID/steps/s1 -H 'content-type: application/json' -d '{"status":"completed"}' >/dev/null
wait_for "$LOG/events-b.txt" 'event: step_status'
curl -sf http://$B/v1/plans/$ID | python3 -c 'import json,sys;d=json.load(sys.stdin);assert d["state"]=="accepted" and d["plan"]["version"]==3 and d["plan"]["steps"][0]["status"]=="completed",d'
# a stale write through B is refused: A already wrote version 3
code=$(curl -s -o /dev/null -w '%{http_code}' -XPATCH http://$B/v1/plans/$ID/steps/s2 -H 'content-type: application/json' -d '{"status":"completed","expected_version":2}')
[ "$code" = 409 ] || { echo "stale write answered $code, want 409"; exit 1; }
curl -sf http://$A/v1/plans/$ID/history | python3 -c 'import json,sys;v=json.load(sys.stdin)["versions"];assert [x["trigger"] for x in v]==["created","status","step_update"],v'
# Deleted through B: both streams get plan_deleted and end.
curl -sf -XDELETE http://$B/v1/plans/$ID >/dev/null
wait_for "$LOG/events-a.txt" 'event: plan_deleted'; wait_for "$LOG/events-b.txt" 'event: plan_deleted'
for _ in $(seq 50); do kill -0 $EA 2>/dev/null || kill -0 $EB 2>/dev/null || break; sleep 0.1; done
if kill -0 $EA 2>/dev/null || kill -0 $EB 2>/dev/null; then echo "an event stream did not end after plan_deleted"; exit 1; fi
# Each page saw each change once, in order, whichever process it came through.
python3 - "$LOG/events-a.txt" "$LOG/events-b.txt" <<'PY'
import json, sys
for path in sys.argv[1:]:
    events = []
    for block in open(path).read().split("\n\n"):
        lines = dict(l.split(": ", 1) for l in block.splitlines() if ": " in l)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    kinds = [k for k, _ in events]
    assert kinds == ["snapshot", "plan_updated", "step_status", "plan_deleted"], (path, kinds)
    updated, status = events[1][1], events[2][1]
    assert updated["version"] == 2 and updated["data"]["state"] == "accepted", (path, updated)
    assert status["version"] == 3 and status["data"]["step"] == "s1", (path, status)
    assert status["data"]["status"] == "completed", (path, status)
PY
# What each relay did, in /metrics: A sent the step mark, B the acceptance and the deletion.
relayed() { curl -sf "http://$1/metrics" | python3 -c '
import sys
counts = {}
for line in sys.stdin:
    if line.startswith("plansmith_events_relayed_total{"):
        name, value = line.rsplit(" ", 1)
        counts[name.split("\"")[1]] = int(value)
print(counts.get("sent"), counts.get("received"), counts.get("failed"))'; }
[ "$(relayed $A)" = "1 2 0" ] || { echo "A relayed (sent received failed): $(relayed $A), want 1 2 0"; exit 1; }
[ "$(relayed $B)" = "2 1 0" ] || { echo "B relayed (sent received failed): $(relayed $B), want 2 1 0"; exit 1; }
echo "two serves on one PostgreSQL: OK ($ID; each page saw every change)"
