#!/usr/bin/env python3
"""A cold `plansmith plan` process against a warm in-process plan, interleaved in one run.

    python3 scripts/cold-start.py [--bin target/debug/plansmith] [--threads 2] [--runs 5]

Both sides plan the README's request with a new city and recipient each time, so no prompt is
the same twice. The warm side is `plansmith serve` with one sequence (PLANSMITH_PARALLEL=1, as
`plansmith plan` decodes), started once and warmed by one plan; its time is the HTTP round
trip of `POST /v1/plans`. The cold side is a new `plansmith plan` process each time, timed from
its start to its exit, after one run that fills the prompt cache (the "second run with the same
catalog"). The runs alternate, cold then warm, so that a busy neighbour slows both sides alike;
the server is idle while a cold process runs. Prints each run, the medians and their ratio,
and the median stages of the cold runs from `--outcome-json`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
serve = __import__("serve-concurrency")

QUERY = "What's the weather in {city}? Email it to {name}@example.com"


def query(i):
    return QUERY.format(city=serve.CITIES[i % len(serve.CITIES)],
                        name=serve.NAMES[(i * 7) % len(serve.NAMES)])


def cold(binary, tools, threads, text):
    env = dict(os.environ, PLANSMITH_THREADS=str(threads))
    started = time.time()
    done = subprocess.run([binary, "plan", text, "--tools", tools, "--outcome-json"], env=env,
                          capture_output=True, text=True, timeout=1800)
    took = time.time() - started
    if done.returncode not in (0, 2):
        raise SystemExit(f"plansmith plan failed ({done.returncode}): {done.stderr[-2000:]}")
    outcome = json.loads(done.stdout)
    diagnostics = outcome.get("diagnostics", {})
    attempts = diagnostics.get("attempts") or [{}]
    return took, outcome.get("status"), attempts[0].get("stages", {}), diagnostics.get("timings", {})


def warm(url, i):
    body = json.dumps({"query": query(i)}).encode()
    req = serve.urllib.request.Request(url + "/v1/plans", body,
                                       {"Content-Type": "application/json"})
    started = time.time()
    reply = json.loads(serve.urllib.request.urlopen(req, timeout=1800).read())
    return time.time() - started, reply.get("status") or reply.get("plan", {}).get("status")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="target/debug/plansmith")
    parser.add_argument("--tools", default="examples/tools.json")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        proc, url = serve.start(args.bin, 1, args.threads, args.tools, work)
        try:
            warm(url, 100)
            first, status, _, _ = cold(args.bin, args.tools, args.threads, query(101))
            print(f"cold, first run: {first:.2f} s ({status}; fills the prompt cache)")
            colds, warms, stages, timings = [], [], [], []
            for run in range(args.runs):
                took, status, stage, timing = cold(args.bin, args.tools, args.threads,
                                                   query(2 * run))
                colds.append(took)
                stages.append(stage)
                timings.append(timing)
                w, wstatus = warm(url, 2 * run + 1)
                warms.append(w)
                print(f"run {run + 1}: cold {took:.2f} s ({status}), warm {w:.2f} s ({wstatus})")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    cold_median, warm_median = statistics.median(colds), statistics.median(warms)
    print(f"\nmedian: cold {cold_median:.2f} s, warm {warm_median:.2f} s, "
          f"ratio {cold_median / warm_median:.2f}")
    for key in ("load_ms", "restored_tokens", "restore_ms", "prompt_ms", "generate_ms"):
        values = [s[key] for s in stages if key in s]
        if values:
            print(f"cold {key}: median {statistics.median(values)}")
    for key in ("select_us", "generate_us", "fit_us", "total_us"):
        values = [t[key] for t in timings if key in t]
        if values:
            print(f"cold {key}: median {statistics.median(values) / 1000:.0f} ms")


if __name__ == "__main__":
    main()
