#!/usr/bin/env python3
"""The baseline a user would pick instead of plansmith: the same GGUF behind llama.cpp's own
server with its native tool calling (`--jinja`: the model's chat template renders the tools,
llama.cpp parses the calls), asked each evaluation case once.

    python3 scripts/native-baseline.py --server "$(scripts/llama-server.sh)/bin/llama-server" \
        --model ~/.local/share/plansmith/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
        --cases ../shared/eval/data/bfcl_cases.jsonl --limit 20 --out /tmp/native.jsonl

Writes the prediction lines `plansmith eval plan` writes (`{"id", "plan": [steps], "seconds"}`,
tool steps `{"id", "type": "tool", "name", "arguments"}`, a text answer as a reply step), so
`score.py plan` and `score_nestful.py` score both the same way. Cases are BFCL lines
(`messages`, `tools`) or NESTFUL lines (`query`, `tools`). Python's standard library only.

Small models often write their calls as JSON text instead of the template's tags, and then
llama.cpp reports no tool call. `--lenient PREDS OUT` rewrites a prediction file with such
text read as calls, for the baseline's best case:

    python3 scripts/native-baseline.py --lenient /tmp/native.jsonl /tmp/native-lenient.jsonl
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(base, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"llama-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("llama-server did not become ready")


def openai_tools(tools):
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


def plan_of(message):
    steps = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = {}
        steps.append(
            {
                "id": f"s{len(steps) + 1}",
                "type": "tool",
                "name": function.get("name", ""),
                "arguments": arguments if isinstance(arguments, dict) else {},
            }
        )
    text = (message.get("content") or "").strip()
    if not steps and text:
        steps.append({"id": "s1", "type": "reply", "text": text})
    return steps


def text_calls(text):
    """The calls a reply wrote as text (bare JSON objects, or inside a Markdown fence)
    instead of as tool calls: what a user who reads the text leniently would get."""
    body = text.strip()
    if body.startswith("```"):
        body = body[3:].lstrip("json").strip()
        if body.endswith("```"):
            body = body[:-3]
    decoder, calls, at = json.JSONDecoder(), [], 0
    body = body.strip()
    while at < len(body):
        try:
            value, end = decoder.raw_decode(body, at)
        except json.JSONDecodeError:
            return None
        if not (isinstance(value, dict) and isinstance(value.get("name"), str)):
            return None
        calls.append(value)
        at = end
        while at < len(body) and body[at].isspace():
            at += 1
    return calls or None


def lenient(in_path, out_path):
    """Rewrites predictions with text replies read as calls where they are calls."""
    with open(in_path) as lines, open(out_path, "w") as out:
        for line in lines:
            row = json.loads(line)
            plan = row["plan"]
            if len(plan) == 1 and plan[0]["type"] == "reply":
                calls = text_calls(plan[0]["text"])
                if calls:
                    row["plan"] = [
                        {"id": f"s{n}", "type": "tool", "name": c["name"],
                         "arguments": c.get("arguments") if isinstance(c.get("arguments"), dict) else {}}
                        for n, c in enumerate(calls, 1)
                    ]
            out.write(json.dumps(row) + "\n")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--lenient":
        # scripts/native-baseline.py --lenient PREDS.jsonl OUT.jsonl
        lenient(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="the llama-server binary")
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--cases", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--limit", type=int, help="at most this many cases per category")
    parser.add_argument("--category", action="append", default=[])
    parser.add_argument("--threads", type=int, default=1, help="generation threads (plansmith's default is 1)")
    parser.add_argument("--max-tokens", type=int, default=600)
    parser.add_argument(
        "--tools-from",
        help="a `plansmith eval plan` output: each case is shown only the tools plansmith showed "
        "the model (its `tools`), so a case with a whole library (NESTFUL) fits the context and "
        "both are asked the same",
    )
    args = parser.parse_args()
    shown = {}
    if args.tools_from:
        with open(args.tools_from) as lines:
            for line in lines:
                if line.strip():
                    row = json.loads(line)
                    if isinstance(row.get("tools"), list):
                        shown[row["id"]] = set(row["tools"])

    cases, seen = [], {}
    with open(args.cases) as lines:
        for line in lines:
            if not line.strip():
                continue
            case = json.loads(line)
            category = case.get("category", "nestful")
            if args.category and category not in args.category:
                continue
            seen[category] = seen.get(category, 0) + 1
            if args.limit is not None and seen[category] > args.limit:
                continue
            if case["id"] in shown:
                case["tools"] = [t for t in case["tools"] if t.get("name") in shown[case["id"]]]
            elif args.tools_from:
                continue  # not planned by plansmith: nothing to compare with
            cases.append(case)

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [
        args.server, "-m", os.path.expanduser(args.model), "--jinja", "--host", "127.0.0.1",
        "--port", str(port), "-c", "4096", "-np", "1", "-t", str(args.threads),
        "-tb", str(os.cpu_count() or 1), "--no-webui",
    ]
    log = open(args.out + ".server.log", "w")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(base, proc)
        started = time.time()
        with open(args.out, "w") as out:
            for n, case in enumerate(cases, 1):
                messages = case.get("messages") or [{"role": "user", "content": case["query"]}]
                body = {
                    "messages": messages,
                    "tools": openai_tools(case["tools"]),
                    "tool_choice": "auto",
                    "parallel_tool_calls": True,
                    "temperature": 0,
                    "max_tokens": args.max_tokens,
                    # Each case from an empty cache, as `plansmith eval plan` plans them.
                    "cache_prompt": False,
                }
                request = urllib.request.Request(
                    f"{base}/v1/chat/completions",
                    data=json.dumps(body).encode(),
                    headers={"content-type": "application/json"},
                )
                case_started = time.time()
                try:
                    with urllib.request.urlopen(request, timeout=600) as answer:
                        reply = json.load(answer)
                    plan = plan_of(reply["choices"][0]["message"])
                    status = "ok"
                except Exception as err:  # a refused request is a wrong answer, not the end
                    plan, status = [], f"error: {err}"
                seconds = round(time.time() - case_started, 1)
                out.write(json.dumps({"id": case["id"], "plan": plan, "status": status, "seconds": seconds}) + "\n")
                out.flush()
                print(f"{n}/{len(cases)} {case['id']} {seconds} s", file=sys.stderr)
        total = time.time() - started
        print(f"{len(cases)} cases in {total:.0f} s ({total / max(len(cases), 1):.1f} s/case); wrote {args.out}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
