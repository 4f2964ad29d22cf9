#!/usr/bin/env bash
# Load test on loopback (a bench, not a test): `POST /v1/plans` at 64 concurrent clients for a
# fixed time against `plansmith serve` (scripted model that answers instantly; every plan is
# persisted) and against a bare axum handler returning the same payload
# (crates/plansmith-server/examples/bare_handler.rs). Prints plans/s, p50, p99 and the ratio,
# and per request the CPU time of the server (and of its SQLite writer thread), of wrk and of
# PostgreSQL's processes, and the bytes the server and PostgreSQL wrote to disk (from /proc, over
# the wrk run).
#
#   scripts/load-test.sh [SECONDS]      # default 15; needs wrk (Debian) and curl
#
# With PLANSMITH_TEST_POSTGRES_URL set, plansmith is measured on PostgreSQL too.
# Release builds (`cargo build --release`); CONNECTIONS and THREADS override 64 and 2.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}
conns=${CONNECTIONS:-64}
threads=${THREADS:-2}
command -v wrk >/dev/null || { echo "load-test: needs wrk (apt-get install wrk)" >&2; exit 2; }

cargo build --release --quiet -p plansmith --no-default-features
cargo build --release --quiet -p plansmith-server --example bare_handler
bin=target/release/plansmith
bare=target/release/examples/bare_handler

work=$(mktemp -d "${TMPDIR:-/tmp}/plansmith-load.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]+"${pids[@]}"}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
body='{"query": "Email Bob the weather in Paris"}'
cat >"$work/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
LUA

wait_up() { for _ in $(seq 150); do curl -s -o /dev/null "http://$1$2" && return 0; sleep 0.2; done; echo "load-test: $1 did not start" >&2; exit 1; }
total() { curl -sf "http://$1/v1/plans?limit=1&exact_total=true" | python3 -c 'import json,sys;print(json.load(sys.stdin)["total"])'; }

# ticks PID [COMM]: CPU clock ticks (user + system) of PID's threads, or of those named COMM.
ticks() {
  local sum=0 t
  for t in /proc/"$1"/task/*; do
    [ -n "${2:-}" ] && [ "$(cat "$t/comm" 2>/dev/null)" != "$2" ] && continue
    sum=$((sum + $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo 0)))
  done
  echo "$sum"
}
# written PID: bytes PID has written to disk (0 if it is gone).
written() { awk '/^write_bytes/{print $2}' /proc/"$1"/io 2>/dev/null || echo 0; }
# db_stat: "TICKS BYTES", the CPU clock ticks and the bytes written to disk of every process named
# `postgres` on this machine (a PostgreSQL cluster here, its server and backends; 0 0 if none).
db_stat() {
  local p sum=0 bytes=0
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = postgres ] || continue
    sum=$((sum + $(ticks "${p#/proc/}")))
    bytes=$((bytes + $(written "${p#/proc/}")))
  done
  echo "$sum $bytes"
}

# run NAME ADDR PID [db]: wrk for $secs seconds against the server PID; prints "NAME rps p50 p99
# non2xx errors cpu wrk_cpu writer_cpu disk db_cpu db_disk": CPU µs per request of the server,
# of wrk and of the server's SQLite writer thread, bytes the server wrote to disk per request,
# and with `db` the CPU µs and bytes written per request of PostgreSQL's processes (else "-").
run() {
  local s0 w0 d0 s1 w1 d1 wrk_cpu db0=(0 0) db1=(0 0)
  [ "${4:-}" = db ] && read -r -a db0 <<<"$(db_stat)"
  s0=$(ticks "$3"); w0=$(ticks "$3" plansmith-sqlit); d0=$(written "$3")
  wrk_cpu=$( { TIMEFORMAT='%U %S'; time wrk -t"$threads" -c"$conns" -d"${secs}s" --latency \
    -s "$work/post.lua" "http://$2/v1/plans" >"$work/$1.wrk" 2>"$work/$1.err"; } 2>&1)
  s1=$(ticks "$3"); w1=$(ticks "$3" plansmith-sqlit); d1=$(written "$3")
  [ "${4:-}" = db ] && read -r -a db1 <<<"$(db_stat)"
  python3 - "$1" "$work/$1.wrk" "$((s1 - s0))" "$((w1 - w0))" "$((d1 - d0))" "$(getconf CLK_TCK)" \
    "${4:-}" "$((db1[0] - db0[0]))" "$((db1[1] - db0[1]))" $wrk_cpu <<'PY'
import re, sys
name, text = sys.argv[1], open(sys.argv[2]).read()
server, writer, disk, hz = (int(v) for v in sys.argv[3:7])
db, db_cpu, db_disk = sys.argv[7] == "db", int(sys.argv[8]), int(sys.argv[9])
wrk_s = float(sys.argv[10]) + float(sys.argv[11])
def ms(v):
    n, unit = re.match(r"([\d.]+)(us|ms|s)", v).groups()
    return float(n) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
p50 = ms(re.search(r"^\s+50%\s+(\S+)", text, re.M).group(1))
p99 = ms(re.search(r"^\s+99%\s+(\S+)", text, re.M).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
errs = re.search(r"Socket errors: (.*)", text)
errs = errs.group(1).replace(" ", "") if errs else "none"
done = int(re.search(r"(\d+) requests in", text).group(1))
us = lambda ticks: f"{ticks / hz * 1e6 / done:.1f}"
print(f"{name} {rps:.0f} {p50:.2f} {p99:.2f} {bad.group(1) if bad else 0} {errs} "
      f"{us(server)} {wrk_s * 1e6 / done:.1f} {us(writer)} {disk // done} "
      f"{us(db_cpu) if db else '-'} {db_disk // done if db else '-'}")
PY
}

results=()
# measure NAME PORT STORE [db]: plansmith serve on STORE, measured, and what was persisted counted
# (`db`: PostgreSQL's processes on this machine are measured too)
measure() {
  local name=$1 port=$2 store=$3 addr="127.0.0.1:$2"
  PLANSMITH_TOKENS= PLANSMITH_RATE_LIMIT= "$bin" serve --addr "$addr" --tools examples/tools.json \
    --model scripted:examples/replies/weather-email-repeat.json --store "$store" 2>"$work/$name.log" &
  pids+=($!)
  wait_up "$addr" /healthz
  curl -sf -XPOST "http://$addr/v1/plans" -H 'content-type: application/json' -d "$body" >"$work/payload.json"
  local before after line
  before=$(total "$addr")
  line=$(run "$name" "$addr" "${pids[-1]}" "${4:-}")
  after=$(total "$addr")
  local persisted=$((after - before))
  results+=("$line $persisted")
  kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
}

measure plansmith-sqlite 18291 "sqlite:$work/plans.db"
# Bytes on disk per stored plan (database, WAL and index pages, after the server stopped).
sqlite_plans=$(($(read -r -a r <<<"${results[-1]}"; echo "${r[12]}") + 1))
sqlite_bytes=$(cat "$work"/plans.db* | wc -c)
if [ -n "${PLANSMITH_TEST_POSTGRES_URL:-}" ]; then
  # A fresh database each run (with psql): plans left by earlier runs would slow this one.
  pg_url=$PLANSMITH_TEST_POSTGRES_URL
  if command -v psql >/dev/null; then
    pg_db="plansmith_load_$$"
    psql -q "$pg_url" -c "CREATE DATABASE $pg_db" >/dev/null
    pg_base=$pg_url
    trap 'cleanup; psql -q "$pg_base" -c "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1 || true' EXIT
    pg_url="${pg_url%/*}/$pg_db"
  fi
  # Its processes are measured when it runs on this machine.
  case $pg_url in
    *@localhost[:/]* | *@127.0.0.1[:/]* | *@\[::1\][:/]*) pg_here=db ;;
    *) pg_here= ;;
  esac
  measure plansmith-postgres 18293 "$pg_url" $pg_here
fi
"$bare" 127.0.0.1:18292 "$work/payload.json" 2>/dev/null &
pids+=($!)
wait_up 127.0.0.1:18292 /
results+=("$(run bare 127.0.0.1:18292 "${pids[-1]}") -")

echo
echo "POST /v1/plans, $conns connections, $threads wrk threads, ${secs} s each, $(nproc) cores, payload $(wc -c <"$work/payload.json") bytes"
printf '%-20s %10s %10s %9s %9s %8s %s\n' target "req/s" "plans/s" "p50 ms" "p99 ms" non-2xx "socket errors"
bare_rps=""
for r in "${results[@]}"; do
  read -r name rps p50 p99 bad errors _ _ _ _ _ _ persisted <<<"$r"
  if [ "$persisted" = "-" ]; then plans="-"; bare_rps=$rps; else plans=$(python3 -c "print(f'{$persisted/$secs:.0f}')"); fi
  printf '%-20s %10s %10s %9s %9s %8s %s\n' "$name" "$rps" "$plans" "$p50" "$p99" "$bad" "$errors"
done
echo
echo "Per request: CPU µs of the server (all its threads), of it the SQLite writer thread's, of"
echo "wrk and of PostgreSQL's processes on this machine, and the bytes the server and PostgreSQL"
echo "wrote to disk"
printf '%-20s %10s %10s %10s %10s %10s %10s\n' target "server µs" "writer µs" "wrk µs" "db µs" \
  "disk B" "db disk B"
for r in "${results[@]}"; do
  read -r name _ _ _ _ _ cpu wrk_cpu writer disk db_cpu db_disk _ <<<"$r"
  printf '%-20s %10s %10s %10s %10s %10s %10s\n' "$name" "$cpu" "$writer" "$wrk_cpu" "$db_cpu" \
    "$disk" "$db_disk"
done
for r in "${results[@]}"; do
  read -r name rps _ <<<"$r"
  [ "$name" = bare ] && continue
  python3 -c "print(f'$name / bare: {$rps/$bare_rps:.2f}x the bare handler rate')"
done
echo "SQLite on disk: $((sqlite_bytes / sqlite_plans)) bytes per plan ($sqlite_plans plans)"
