#!/usr/bin/env python3
"""How much decoding several requests together gains on this machine, measured with
llama.cpp's own server (continuous batching over parallel slots), before the embedded model
builds the same thing.

    S="$(scripts/llama-server.sh)/bin/llama-server"
    python3 scripts/batching-probe.py --server $S --mode prompt 1 4   # a new 1,207-token prompt
    python3 scripts/batching-probe.py --server $S --mode cached 1 4   # the system part cached
    python3 scripts/batching-probe.py --server $S --mode generation 1 4  # 67 tokens in, 150 out

With --server the script starts llama-server (4 slots in one 16k context, 2 threads, the default
embedded model) and stops it at the end; without, it uses the server at --url.

Each mode runs its requests one at a time and with N at once (the numbers given), and prints
the plans per minute and the median latency.
"""
import argparse
import json
import os
import subprocess
import threading
import time
import urllib.request

MODEL = os.path.expanduser("~/.local/share/plansmith/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")

TOOLS = "\n".join(
    f"- tool_{i}(city: string, date: string, units: string): Returns the forecast number {i} "
    "for a city on a date, with temperature, wind and rain chance."
    for i in range(30)
)


def request(url, mode, i, max_tokens=150):
    tools = "get_weather(city), send_email(to, body)" if mode == "generation" else TOOLS
    body = {
        "messages": [
            {"role": "system", "content": "You are a planner. Write a JSON plan of tool calls.\nTools:\n" + tools},
            {"role": "user", "content": f"Request {i}: What's the weather in city number {i} tomorrow, "
                                        f"and email it to bob{i}@example.com"},
        ],
        "max_tokens": max_tokens,
        "temperature": 0,
        "cache_prompt": mode != "prompt",
        # Every reply is max_tokens long, so the sides compare the same work.
        "ignore_eos": True,
    }
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    started = time.time()
    reply = json.loads(urllib.request.urlopen(req, timeout=900).read())
    return time.time() - started, reply["usage"]


def run(url, mode, n, at_once):
    latencies, lock, numbers = [], threading.Lock(), iter(range(n))

    def worker():
        while True:
            with lock:
                i = next(numbers, None)
            if i is None:
                return
            seconds, usage = request(url, mode, i + 100 * at_once)
            with lock:
                latencies.append((seconds, usage))

    started = time.time()
    threads = [threading.Thread(target=worker) for _ in range(at_once)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = time.time() - started
    latencies.sort(key=lambda x: x[0])
    tokens = sum(u["completion_tokens"] for _, u in latencies) / len(latencies)
    print(f"{mode}: {at_once} at once, {n} requests: {60 * n / total:.2f} plans/min, "
          f"p50 {latencies[len(latencies) // 2][0]:.1f} s, prompt {latencies[0][1]['prompt_tokens']} "
          f"tokens, {tokens:.0f} tokens out on average", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8093/v1/chat/completions")
    parser.add_argument("--mode", choices=["prompt", "cached", "generation"], required=True)
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--server", help="llama-server to start (else the one at --url is used)")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("at_once", type=int, nargs="+")
    args = parser.parse_args()
    server = None
    if args.server:
        port = args.url.split(":")[2].split("/")[0]
        server = subprocess.Popen(
            [args.server, "-m", args.model, "-c", "16384", "-np", str(max(args.at_once)),
             "-t", str(args.threads), "-tb", str(args.threads), "--port", port, "--no-webui"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        health = args.url.split("/v1/")[0] + "/health"
        for _ in range(120):
            try:
                if urllib.request.urlopen(health, timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(1)
    try:
        request(args.url, args.mode, 0, 5)  # warm up
        for at_once in args.at_once:
            run(args.url, args.mode, args.requests, at_once)
    finally:
        if server:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
