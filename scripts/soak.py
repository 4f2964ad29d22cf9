#!/usr/bin/env python3
"""Soak of `plansmith serve` on SQLite (a bench, not a test): mixed plan, review and run traffic
for a fixed time, the server's resident memory sampled throughout, then every plan a request
acknowledged is read back and compared with what its last acknowledged answer said.

    scripts/soak.py [SECONDS] [CLIENTS]      # default 600 s, 4 clients

Each client loops: create a plan (scripted model, examples/tools.json), read it, then one of
accept + run to the end (the example tools, through examples/commands.json), reject, a JSON
Patch of the title, free-text edit (replanned), a dry-run check, or delete. It uses the binary
in $PLANSMITH_BIN (default target/debug/plansmith, built by `cargo build -p plansmith`).

Exits 1 when a plan was lost or differs, a request got a 5xx or no answer, or the resident
memory of the last minute is more than 25 % above that of the second minute (after warm-up).
"""
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 600
CLIENTS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
BIN = os.environ.get("PLANSMITH_BIN", os.path.join(ROOT, "target/debug/plansmith"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    def __init__(self, base, stats):
        self.base = base
        self.stats = stats

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("content-type", "application/json")
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                status, text = answer.status, answer.read()
        except urllib.error.HTTPError as err:
            status, text = err.code, err.read()
        except Exception as err:  # no answer at all: counted, and the plan is not acknowledged
            self.stats.record(method, path, None, time.monotonic() - started, str(err))
            return None, None
        self.stats.record(method, path, status, time.monotonic() - started)
        return status, (json.loads(text) if text else None)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latency = []
        self.statuses = {}
        self.failures = []

    def record(self, method, path, status, seconds, error=None):
        with self.lock:
            self.latency.append(seconds)
            key = status if status is not None else "no answer"
            self.statuses[key] = self.statuses.get(key, 0) + 1
            if status is None or status >= 500:
                self.failures.append(f"{method} {path}: {status} {error or ''}")


def client_loop(client, deadline, expected, lock, rng):
    """One client's traffic; `expected` maps each acknowledged plan to what it must look like."""
    while time.monotonic() < deadline:
        status, body = client.call("POST", "/v1/plans", {"query": "Email Bob the weather in Paris"})
        if status != 201:
            continue
        plan_id = body["stored"]["plan"]["id"]
        with lock:
            expected[plan_id] = {"state": "awaiting_review"}
        client.call("GET", f"/v1/plans/{plan_id}")
        roll = rng.random()
        if roll < 0.40:
            status, _ = client.call("POST", f"/v1/plans/{plan_id}/feedback", {"action": "accept"})
            if status != 200:
                continue
            with lock:
                expected[plan_id] = {"state": "accepted"}
            status, _ = client.call("POST", f"/v1/plans/{plan_id}/run", {})
            if status != 202:
                continue
            for _ in range(300):
                status, plan = client.call("GET", f"/v1/plans/{plan_id}")
                steps = [s.get("status") for s in (plan or {}).get("plan", {}).get("steps", [])]
                if status == 200 and "run" in plan.get("actions", []) and all(
                    s == "completed" for s in steps
                ):
                    with lock:
                        expected[plan_id] = {"state": plan["state"], "completed": len(steps)}
                    break
                time.sleep(0.1)
        elif roll < 0.85:
            # Reject, a JSON Patch of the title, or free-text feedback (replanned).
            title = f"soak {rng.randrange(1_000_000)}"
            body, want = [
                ({"action": "reject", "text": "not now"}, {"state": "rejected"}),
                (
                    {"action": "patch", "patch": [{"op": "replace", "path": "/title", "value": title}]},
                    {"state": "awaiting_review", "title": title},
                ),
                ({"action": "edit", "text": "in Fahrenheit"}, {"state": "awaiting_review"}),
            ][min(2, int((roll - 0.40) / 0.15))]
            status, _ = client.call("POST", f"/v1/plans/{plan_id}/feedback", body)
            if status == 200:
                with lock:
                    expected[plan_id] = want
        elif roll < 0.95:
            patch = [{"op": "replace", "path": "/steps/0/action/arguments/city", "value": "Lyon"}]
            client.call("POST", f"/v1/plans/{plan_id}/check", {"patch": patch})
        else:
            status, _ = client.call("DELETE", f"/v1/plans/{plan_id}")
            if status in (200, 204):
                with lock:
                    expected[plan_id] = {"deleted": True}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    if not os.path.exists(BIN):
        sys.exit(f"soak: no binary at {BIN}; build it with `cargo build -p plansmith`")
    work = tempfile.mkdtemp(prefix="plansmith-soak.")
    port = free_port()
    server = subprocess.Popen(
        [
            BIN, "serve", "--addr", f"127.0.0.1:{port}", "--store", f"sqlite:{work}/plans.db",
            "--model", "scripted:examples/replies/weather-email-repeat.json",
            "--tools", "examples/tools.json", "--commands", "examples/commands.json",
            "--rate-limit", "0",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(f"{work}/serve.log", "w"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except Exception:
                time.sleep(0.2)
        else:
            sys.exit("soak: the server did not start")
        stats = Stats()
        expected, lock = {}, threading.Lock()
        started = time.monotonic()
        deadline = started + SECONDS
        samples = []
        threads = [
            threading.Thread(
                target=client_loop,
                args=(Client(base, stats), deadline, expected, lock, random.Random(n)),
            )
            for n in range(CLIENTS)
        ]
        for thread in threads:
            thread.start()
        while time.monotonic() < deadline:
            samples.append((time.monotonic() - started, rss_kib(server.pid)))
            time.sleep(5)
        for thread in threads:
            thread.join()
        samples.append((time.monotonic() - started, rss_kib(server.pid)))

        # Every acknowledged plan, read back.
        check = Client(base, Stats())
        lost, differs, kept = [], [], 0
        for plan_id, want in expected.items():
            status, plan = check.call("GET", f"/v1/plans/{plan_id}")
            if want.get("deleted"):
                if status != 404:
                    differs.append(f"{plan_id}: deleted, but GET answered {status}")
                continue
            if status != 200:
                lost.append(f"{plan_id}: GET answered {status}")
                continue
            kept += 1
            if plan["state"] != want["state"]:
                differs.append(f"{plan_id}: state {plan['state']}, expected {want['state']}")
            if "title" in want and plan["plan"]["title"] != want["title"]:
                differs.append(f"{plan_id}: title {plan['plan']['title']!r}, expected {want['title']!r}")
            done = sum(1 for s in plan["plan"]["steps"] if s.get("status") == "completed")
            if "completed" in want and done != want["completed"]:
                differs.append(f"{plan_id}: {done} steps completed, expected {want['completed']}")
        _, listing = check.call("GET", "/v1/plans?limit=1&exact_total=true")
        total = (listing or {}).get("total")

        def window(lo, hi):
            values = [kib for t, kib in samples if lo <= t < hi]
            return statistics.median(values) / 1024 if values else float("nan")

        second = window(60, 120)
        last = window(SECONDS - 60, SECONDS + 60)
        peak = max(kib for _, kib in samples) / 1024
        latency = sorted(stats.latency)
        p = lambda q: latency[min(len(latency) - 1, int(q * len(latency)))] * 1000  # noqa: E731
        runs = sum(1 for w in expected.values() if "completed" in w)
        print(f"soak: {SECONDS} s, {CLIENTS} clients, {len(latency)} requests "
              f"({len(latency) / SECONDS:.1f}/s), p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms")
        print(f"  answers by status: {dict(sorted(stats.statuses.items(), key=str))}")
        print(f"  plans acknowledged: {len(expected)}, of which deleted "
              f"{sum(1 for w in expected.values() if w.get('deleted'))}, run to completion {runs}; "
              f"kept and read back: {kept}; store total: {total}")
        print(f"  resident memory: median {second:.1f} MiB in minute 2, {last:.1f} MiB in the last "
              f"minute, peak {peak:.1f} MiB")
        problems = stats.failures[:10] + lost[:10] + differs[:10]
        if total != kept:
            problems.append(f"the store lists {total} plans, {kept} were expected")
        if last > second * 1.25:
            problems.append(f"memory grew: {second:.1f} -> {last:.1f} MiB")
        for problem in problems:
            print(f"  PROBLEM: {problem}")
        return 1 if problems else 0
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
