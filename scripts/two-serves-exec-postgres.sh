#!/usr/bin/env bash
# Two `plansmith serve` processes on one PostgreSQL store run a batch of plans together; one is
# killed (SIGKILL) mid-run. Every step must run to completion exactly once: the tool below logs
# "start"/"done" lines with the node and the idempotency key, and honours the key.
# Usage: scripts/two-serves-exec-postgres.sh POSTGRES_URL   (needs target/debug/plansmith,
# built with `cargo build -p plansmith --no-default-features`; the database should be empty)
set -euo pipefail
URL="$1"; BIN="${PLANSMITH_BIN:-target/debug/plansmith}"
N_PLANS="${N_PLANS:-6}"
A=127.0.0.1:18191; B=127.0.0.1:18192
WORK=$(mktemp -d)
TOOL="$PWD/crates/plansmith-exec/tests/tools/append.sh"
EFFECTS="$WORK/effects"
# Each process gets its own commands file: the tag names the node in the effects log.
for node in A B; do
  cat >"$WORK/commands-$node.json" <<JSON
{"tools": {"append": {"command": ["sh", "$TOOL", "$EFFECTS", "0.4"], "env": {"TAG": "$node"}}}}
JSON
done
cat >"$WORK/tools.json" <<'JSON'
[{"name": "append", "description": "Append a line to the log.", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}]
JSON
# The scripted model answers every planning request with the same 5-step plan (4 parallel
# appends, then one that depends on them).
python3 - "$WORK/model.json" "$N_PLANS" <<'PY'
import json, sys
steps = [{"id": f"s{i}", "type": "tool", "title": f"append {i}", "name": "append", "arguments": {"n": i}} for i in range(1, 5)]
steps.append({"id": "s5", "type": "tool", "title": "append last", "name": "append", "arguments": {"n": 5},
              "depends_on": ["s1", "s2", "s3", "s4"]})
turn = json.dumps({"title": "batch", "steps": steps})
json.dump({"capabilities": {"json_schema": True}, "turns": [turn] * int(sys.argv[2])}, open(sys.argv[1], "w"))
PY
common=(--tools "$WORK/tools.json" --model "scripted:$WORK/model.json" --store "$URL" --lease-secs 2 --exec-concurrency 2)
"$BIN" serve --addr $A "${common[@]}" --commands "$WORK/commands-A.json" 2>"$WORK/a.log" & PA=$!
trap 'kill $PA ${PB:-} 2>/dev/null || true; tail -n 20 "$WORK"/*.log; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do curl -sf http://$A/healthz >/dev/null && break; sleep 0.2; done
"$BIN" serve --addr $B "${common[@]}" --commands "$WORK/commands-B.json" 2>"$WORK/b.log" & PB=$!
for _ in $(seq 100); do curl -sf http://$B/healthz >/dev/null && break; sleep 0.2; done

IDS=()
for i in $(seq "$N_PLANS"); do
  id=$(curl -sf -XPOST http://$A/v1/plans -H 'content-type: application/json' \
    -d '{"query": "append five lines", "auto_accept": true}' |
    python3 -c 'import json,sys;print(json.load(sys.stdin)["stored"]["plan"]["id"])')
  IDS+=("$id")
done
# Start half the runs on A, half on B; both processes' workers join every run.
for i in "${!IDS[@]}"; do
  host=$A; [ $((i % 2)) = 1 ] && host=$B
  curl -sf -XPOST "http://$host/v1/plans/${IDS[$i]}/run" >/dev/null
done
sleep 1.0
kill -KILL $PB; wait $PB 2>/dev/null || true; PB=
echo "killed B mid-run"
# A finishes everything (B's leases expire after 2 s).
for _ in $(seq 300); do
  left=0
  for id in "${IDS[@]}"; do
    state=$(curl -sf "http://$A/v1/plans/$id" | python3 -c 'import json,sys;print(json.load(sys.stdin)["plan"].get("metadata",{}).get("last_run",{}).get("state",""))')
    [ "$state" = completed ] || left=$((left + 1))
  done
  [ $left = 0 ] && break
  sleep 0.2
done
if [ $left != 0 ]; then
  echo "$left plan(s) did not complete"
  for id in "${IDS[@]}"; do
    curl -sf "http://$A/v1/plans/$id" | python3 -c 'import json,sys
p=json.load(sys.stdin)["plan"]
print(p["id"], p.get("metadata",{}).get("last_run"), [(s["id"], s["status"]) for s in p["steps"]])'
  done
  cat "$EFFECTS"
  exit 1
fi
python3 - "$EFFECTS" "${IDS[@]}" <<'PY'
import collections, sys
lines = [l.split() for l in open(sys.argv[1])]
ids = sys.argv[2:]
done = collections.Counter()
nodes = collections.Counter()
for parts in lines:
    kind, step, key = parts[0], parts[1], parts[-1]
    plan = key.split(":")[0]
    if kind == "done":
        done[(plan, step)] += 1
        nodes[parts[2] if len(parts) == 4 else "?"] += 1
want = {(p, f"s{i}") for p in ids for i in range(1, 6)}
bad = {k: v for k, v in done.items() if v != 1}
missing = want - set(done)
assert not bad and not missing, f"not exactly once: {bad}, missing {missing}"
starts = sum(1 for p in lines if p[0] == "start")
print(f"{len(want)} steps over {len(ids)} plans each done exactly once; done by node: {dict(nodes)}; "
      f"{starts} starts ({starts - len(want)} re-run(s) after B died, same idempotency key)")
assert nodes.get("B", 0) > 0, "B never ran a step before it was killed"
PY
echo "two serves running plans on one PostgreSQL: OK"
