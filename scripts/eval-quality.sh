#!/usr/bin/env bash
# Plan quality in one command: plans the BFCL and NESTFUL development cases and the chained
# requests of examples/eval with a model, scores them with the evaluation set's own scorers, and
# prints one table (BFCL per category, NESTFUL's measures, chained requests, seconds per case).
# With --baseline the same GGUF is also asked through llama.cpp's own server with its native
# tool calling (scripts/native-baseline.py, its text read as calls, shown the tools plansmith's
# model was shown), in a column beside.
#
#   scripts/eval-quality.sh [--limit N] [--nestful-limit N] [--model MODEL] [--baseline]
#                           [--out DIR] [--eval DIR]
#
#   --limit N          BFCL cases per category (default 8)
#   --nestful-limit N  NESTFUL cases per source (default 7; each is planned over its best 6 tools)
#   --model MODEL      as `plansmith eval plan --model` (default: the embedded default model)
#   --baseline         also run the native-tool-calling baseline (local GGUF models only; builds
#                      llama-server with scripts/llama-server.sh on first use)
#   --out DIR          where predictions and scores go (default target/eval-quality)
#   --eval DIR         the evaluation set: data/ and its scorers (default ../shared/eval)
#
# Predictions are kept: a run that is stopped goes on where it left off (`eval plan --resume`)
# when started again with the same --out. Generation uses PLANSMITH_THREADS (default 2 here,
# as the figures in docs/perf.md).
set -euo pipefail
cd "$(dirname "$0")/.."

limit=8
nestful_limit=7
model=""
baseline=false
out=target/eval-quality
eval_dir=../shared/eval
while [ $# -gt 0 ]; do
  case "$1" in
  --limit) limit=$2; shift 2 ;;
  --nestful-limit) nestful_limit=$2; shift 2 ;;
  --model) model=$2; shift 2 ;;
  --baseline) baseline=true; shift ;;
  --out) out=$2; shift 2 ;;
  --eval) eval_dir=$2; shift 2 ;;
  -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "eval-quality: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
data="$eval_dir/data"
for f in "$data/bfcl_cases.jsonl" "$data/nestful_cases.jsonl" "$eval_dir/score.py" "$eval_dir/score_nestful.py"; do
  [ -e "$f" ] || { echo "eval-quality: $f is missing (give the evaluation set with --eval DIR)" >&2; exit 2; }
done
export PLANSMITH_THREADS=${PLANSMITH_THREADS:-2}
mkdir -p "$out"

cargo build -q -p plansmith
bin=target/debug/plansmith
model_args=()
[ -n "$model" ] && model_args=(--model "$model")

plan() { # name, cases, extra args...
  local name=$1 cases=$2
  shift 2
  echo "eval-quality: planning $name ($cases)" >&2
  "$bin" eval plan --cases "$cases" --out "$out/$name.jsonl" --resume "${model_args[@]}" "$@" >&2
}
plan bfcl "$data/bfcl_cases.jsonl" --limit "$limit"
plan nestful "$data/nestful_cases.jsonl" --limit "$nestful_limit" --top-k 6
plan chained examples/eval/chained_cases.jsonl

columns=("$out")
if $baseline; then
  case "$model" in
  "" | local | local:*) ;;
  *) echo "eval-quality: --baseline needs a local GGUF model, not $model" >&2; exit 2 ;;
  esac
  name=${model#local:}
  gguf=$("$bin" models list --json | python3 -c '
import json, sys
name = sys.argv[1]
models = json.load(sys.stdin)
models = models.get("models", models) if isinstance(models, dict) else models
for m in models:
    if name in ("", "local") and m.get("default") or m.get("name") == name:
        print(m.get("path", "")); break
' "$name")
  if [ ! -e "$gguf" ]; then
    if [ -e "$name" ]; then gguf=$name; else
      echo "eval-quality: no local file for model '${model:-default}' (run plansmith models pull)" >&2
      exit 2
    fi
  fi
  server="$(bash scripts/llama-server.sh)/bin/llama-server"
  base="$out/native"
  mkdir -p "$base"
  for set in "bfcl:$data/bfcl_cases.jsonl:$limit" "nestful:$data/nestful_cases.jsonl:$nestful_limit" \
    "chained:examples/eval/chained_cases.jsonl:"; do
    IFS=: read -r name cases lim <<<"$set"
    if [ ! -s "$base/$name.raw.jsonl" ]; then
      echo "eval-quality: native baseline on $name" >&2
      # Shown the tools plansmith's model was shown (NESTFUL's libraries do not fit whole).
      python3 scripts/native-baseline.py --server "$server" --model "$gguf" --cases "$cases" \
        ${lim:+--limit "$lim"} --threads "$PLANSMITH_THREADS" --tools-from "$out/$name.jsonl" \
        --out "$base/$name.raw.jsonl" >&2
    fi
    python3 scripts/native-baseline.py --lenient "$base/$name.raw.jsonl" "$base/$name.jsonl"
  done
  columns+=("$base")
fi

python3 - "$eval_dir" "$data" "${columns[@]}" <<'EOF'
import json, subprocess, sys

eval_dir, data, *columns = sys.argv[1:]


def lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return []


def bfcl(col):
    subprocess.run([sys.executable, f"{eval_dir}/score.py", "plan", f"{col}/bfcl.jsonl",
                    "--only-predicted", "--details", f"{col}/bfcl.details.jsonl"],
                   check=True, stdout=subprocess.DEVNULL)
    by = {}
    for d in lines(f"{col}/bfcl.details.jsonl"):
        by.setdefault(d["category"], []).append(d)
    return by


def nestful(col):
    run = subprocess.run([sys.executable, f"{eval_dir}/score_nestful.py",
                          f"{data}/nestful_cases.jsonl", f"{col}/nestful.jsonl",
                          "--only-predicted", "--json"], check=True, capture_output=True, text=True)
    return json.loads(run.stdout).get("ALL", {})


def chained(col):
    cases = {c["id"]: c for c in lines("examples/eval/chained_cases.jsonl")}
    run = subprocess.run([sys.executable, "scripts/score-chained.py",
                          "examples/eval/chained_cases.jsonl", f"{col}/chained.jsonl"],
                         check=True, capture_output=True, text=True)
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    return last.replace("tools right ", "").replace("; dependent argument passed as $ref ", " tools, $ref ")


def seconds(col, name):
    s = [p["seconds"] for p in lines(f"{col}/{name}.jsonl") if "seconds" in p]
    return f"{sum(s) / len(s):.1f}" if s else "–"


scores = [(bfcl(c), nestful(c), chained(c)) for c in columns]
heads = ["plansmith"] + (["native tool calling"] if len(columns) > 1 else [])
rows = []
order = ["simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"]
cats = sorted({k for b, _, _ in scores for k in b},
              key=lambda c: (order.index(c) if c in order else len(order), c))
for cat in cats:
    cells = []
    for b, _, _ in scores:
        ds = b.get(cat, [])
        cells.append(f"{100 * sum(d['correct'] for d in ds) / len(ds):.1f} % ({len(ds)})" if ds else "–")
    rows.append((f"BFCL {cat}", cells))
cells = []
for b, _, _ in scores:
    ds = [d for v in b.values() for d in v]
    cells.append(f"{100 * sum(d['correct'] for d in ds) / len(ds):.1f} % ({len(ds)})" if ds else "–")
rows.append(("BFCL all (micro)", cells))
for key, label in [("name_f1", "name F1"), ("param_f1", "param F1"), ("partial", "partial"),
                   ("full", "full sequence"), ("ref_recall", "ref recall")]:
    rows.append((f"NESTFUL {label}",
                 [f"{n.get(key, 0):.3f}" if key == "ref_recall" else f"{100 * n.get(key, 0):.1f}"
                  for _, n, _ in scores]))
rows.append(("chained: tools right, $ref", [c for _, _, c in scores]))
for name in ["bfcl", "nestful", "chained"]:
    rows.append((f"seconds a case, {name}", [seconds(c, name) for c in columns]))
width = max(len(r[0]) for r in rows)
print("| " + "what".ljust(width) + " | " + " | ".join(heads) + " |")
print("|" + "-" * (width + 2) + "|" + "|".join("---" for _ in heads) + "|")
for label, cells in rows:
    print("| " + label.ljust(width) + " | " + " | ".join(cells) + " |")
EOF
