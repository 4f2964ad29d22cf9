#!/usr/bin/env python3
"""Estimates against the runs that follow them.

For each plan of a small table (chains, fan-outs, retries, task steps), stores it without
running it (`plansmith run FILE --max-tool-calls 0`: the cap stops the run before its first
call), reads its estimate (`plans show ID --json`), runs it (`plansmith run ID --json`), and
prints estimated against actual tool calls, task-step model calls and wall time. A warm-up run
first gives the store's step times something to go on, as a store in use has.

    python3 scripts/estimate-check.py [--plansmith target/debug/plansmith]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "crates/plansmith-exec/tests/tools")


def sh(script, *args):
    return {"command": ["sh", os.path.join(TOOLS, script), *args]}


def tool(step_id, name, after=()):
    # Each call its own arguments: a plan's identical calls are merged into one.
    return {"id": step_id, "type": "tool", "title": f"{name} {step_id}", "name": name,
            "arguments": {"step": step_id}, "depends_on": list(after)}


def task(step_id, after=()):
    return {"id": step_id, "type": "task", "title": f"summarise part {step_id}",
            "kind": "processing", "depends_on": list(after)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plansmith", default=os.path.join(ROOT, "target/debug/plansmith"))
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="plansmith-estimates-")
    store = f"sqlite:{work}/plans.db"
    commands = os.path.join(work, "commands.json")
    with open(commands, "w") as f:
        json.dump({"tools": {
            "fetch": sh("sleep.sh", "0.3"),
            "slow": sh("sleep.sh", "0.8"),
            "flaky": sh("flaky.sh", os.path.join(work, "flaky-count"), "1"),
        }}, f)
    model = os.path.join(work, "model.json")
    turn = {"text": "summarised", "usage": {"prompt_tokens": 200, "completion_tokens": 30}}
    with open(model, "w") as f:
        json.dump({"turns": [turn] * 40}, f)
    env = dict(os.environ, XDG_CONFIG_HOME=work)
    env.pop("PLANSMITH_CONFIG", None)

    def plansmith(*argv):
        done = subprocess.run([args.plansmith, *argv], capture_output=True, text=True,
                              env=env, cwd=ROOT)
        return done

    def run_file(name, steps, *extra):
        path = os.path.join(work, name + ".json")
        with open(path, "w") as f:
            json.dump({"title": name, "steps": steps}, f)
        done = plansmith("run", path, "--store", store, "--commands", commands, "--json",
                         "--model", f"scripted:{model}", *extra)
        plan_id = next(line.split()[-1] for line in done.stderr.splitlines()
                       if line.startswith("stored plan "))
        return plan_id, json.loads(done.stdout)

    # Warm-up: every kind of step once, so the store has times for them.
    run_file("warm-up", [tool("s1", "fetch"), tool("s2", "slow"), task("s3")])

    table = [
        ("chain of three", [tool("s1", "fetch"), tool("s2", "fetch", ["s1"]),
                            tool("s3", "slow", ["s2"])]),
        ("fan-out, then join", [tool("s1", "fetch"), tool("s2", "fetch"), tool("s3", "fetch"),
                                tool("s4", "slow", ["s1", "s2", "s3"])]),
        ("two tasks after a call", [tool("s1", "fetch"), task("s2", ["s1"]),
                                    task("s3", ["s2"])]),
        ("a retried call (never timed)", [tool("s1", "flaky"), tool("s2", "fetch", ["s1"])]),
        ("wide: six at once", [tool(f"s{i}", "fetch") for i in range(1, 7)]),
    ]
    rows = []
    for name, steps in table:
        plan_id, _ = run_file(name.replace(" ", "-").replace(",", "").replace(":", "")
                              .replace("(", "").replace(")", ""), steps,
                              "--max-tool-calls", "0")
        shown = json.loads(plansmith("plans", "show", plan_id, "--store", store,
                                     "--json").stdout)
        estimate = shown["estimate"]
        done = plansmith("run", plan_id, "--store", store, "--commands", commands, "--json",
                         "--model", f"scripted:{model}", "--retries", "2",
                         "--backoff-ms", "100")
        report = json.loads(done.stdout)
        tasks_run = sum(1 for s in steps if s["type"] == "task")
        actual_s = report["elapsed_ms"] / 1000
        rows.append((name, estimate["tool_calls"], report["budget"]["tool_calls"],
                     estimate["model_calls"]["task_steps"], tasks_run,
                     estimate["task_tokens"], report["budget"]["tokens"],
                     estimate["seconds"], actual_s, report["stop_reason"]))
    print("| plan | tool calls est / run | task model calls est / run | task tokens est / run "
          "| seconds est / run | run / est | stop |")
    print("|---|---|---|---|---|---|---|")
    for name, ec, ac, em, am, et, at, es, act, stop in rows:
        ratio = act / es if es else float("nan")
        print(f"| {name} | {ec} / {ac} | {em} / {am} | {et} / {at} | {es:.2f} / {act:.2f} "
              f"| {ratio:.2f} | {stop} |")


if __name__ == "__main__":
    sys.exit(main())
