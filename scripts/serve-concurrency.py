#!/usr/bin/env python3
"""`plansmith serve` on the embedded model under concurrent plan requests: requests decoded
together (PLANSMITH_PARALLEL=4, the server's default) against one at a time
(PLANSMITH_PARALLEL=1, how the server answered before), side by side in one run.

    python3 scripts/serve-concurrency.py [--bin target/debug/plansmith] [--threads 2] 1 2 4 8

For each concurrency level given, each side gets the same requests (the README's request, with
a different city and recipient each, so no two prompts are the same), sent by that many clients
at once; it prints plans per minute and the p50 / p99 latency of a request, and the ratio of
plans per minute, and each server's peak resident memory. The servers run one after the other (never both at once), each started once,
warmed by one plan, and stopped at the end.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

CITIES = ["Paris", "Oslo", "Lima", "Cairo", "Delhi", "Quito", "Rome", "Dakar", "Hanoi", "Perth",
          "Tunis", "Sofia", "Minsk", "Seoul", "Accra", "Bern"]
NAMES = ["bob", "ann", "eve", "joe", "kim", "li", "max", "ola", "pat", "raj", "sam", "tom", "una",
         "val", "wes", "zoe"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary, parallel, threads, tools, work):
    port = free_port()
    env = dict(os.environ, PLANSMITH_PARALLEL=str(parallel), PLANSMITH_THREADS=str(threads),
               PLANSMITH_TIMEOUT_SECS="1800", PLANSMITH_RATE_LIMIT="0",
               PLANSMITH_STORE=f"sqlite:{work}/plans-{parallel}.db")
    log = open(f"{work}/serve-{parallel}.log", "w")
    proc = subprocess.Popen([binary, "serve", "--addr", f"127.0.0.1:{port}", "--tools", tools],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=2)
            return proc, url
        except Exception:
            if proc.poll() is not None:
                raise SystemExit(f"serve (PLANSMITH_PARALLEL={parallel}) exited; see {work}")
            time.sleep(0.5)
    raise SystemExit("serve did not start")


def plan(url, i):
    query = (f"What's the weather in {CITIES[i % len(CITIES)]}? "
             f"Email it to {NAMES[i % len(NAMES)]}@example.com")
    body = json.dumps({"query": query}).encode()
    req = urllib.request.Request(url + "/v1/plans", body, {"Content-Type": "application/json"})
    started = time.time()
    reply = json.loads(urllib.request.urlopen(req, timeout=1800).read())
    return time.time() - started, reply


def run(url, clients, requests, offset):
    latencies, lock, numbers = [], threading.Lock(), iter(range(offset, offset + requests))
    statuses = []

    def client():
        while True:
            with lock:
                i = next(numbers, None)
            if i is None:
                return
            took, reply = plan(url, i)
            with lock:
                latencies.append(took)
                statuses.append(reply.get("status") or reply.get("plan", {}).get("status"))

    started = time.time()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - started
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return {"plans_per_min": 60 * len(latencies) / wall, "p50": statistics.median(latencies),
            "p99": p99, "wall": wall, "statuses": statuses}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="target/debug/plansmith")
    parser.add_argument("--tools", default="examples/tools.json")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=4, help="sequences of the together side")
    parser.add_argument("levels", type=int, nargs="*", default=[1, 2, 4, 8])
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="plansmith-concurrency.")
    results = {}
    for parallel in (1, args.parallel):
        proc, url = start(args.bin, parallel, args.threads, args.tools, work)
        try:
            plan(url, 1000)  # warm: the model loaded, the system prompt cached
            offset = 0
            for level in args.levels:
                requests = max(4, 2 * level)
                results[(parallel, level)] = run(url, level, requests, offset)
                offset += requests
                r = results[(parallel, level)]
                print(f"PLANSMITH_PARALLEL={parallel} clients={level} requests={requests}: "
                      f"{r['plans_per_min']:.2f} plans/min, p50 {r['p50']:.1f} s, "
                      f"p99 {r['p99']:.1f} s, statuses {sorted(set(map(str, r['statuses'])))}",
                      flush=True)
            with open(f"/proc/{proc.pid}/status") as status:
                peak = next(line.split(":")[1].strip() for line in status if line.startswith("VmHWM"))
            print(f"PLANSMITH_PARALLEL={parallel}: peak resident memory {peak}", flush=True)
        finally:
            proc.terminate()
            proc.wait()
    print()
    print(f"| clients | one at a time | {args.parallel} together | gain |")
    print("|---|---|---|---|")
    for level in args.levels:
        a, b = results[(1, level)], results[(args.parallel, level)]
        print(f"| {level} | {a['plans_per_min']:.2f} plans/min, p50 {a['p50']:.1f} s, "
              f"p99 {a['p99']:.1f} s | {b['plans_per_min']:.2f}, p50 {b['p50']:.1f} s, "
              f"p99 {b['p99']:.1f} s | {b['plans_per_min'] / a['plans_per_min']:.2f}× |")


if __name__ == "__main__":
    main()
