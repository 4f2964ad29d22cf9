#!/usr/bin/env python3
"""The goal check on a model: requests over `examples/tools.json` with several parts (cities to
look up, people to email), each planned, stored and run with `--goal-check`, counting the
requests whose first plan missed a part and how many of those the run completed after a replan.

A part is a `get_weather` call for a city or a `send_email` to an address the request names;
what ran is read from the stored plan after the run (each completed step's tool and arguments).
The tools are stand-ins that answer as the real ones would (a forecast, a sent message): the
judge must see results, not `examples/tools`' "no forecast: offline stand-in".

    python3 scripts/goal-check-eval.py [--model local] [--plansmith target/debug/plansmith]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (request, cities looked up, addresses emailed)
REQUESTS = [
    ("What's the weather in Paris and in Berlin? Email both forecasts to bob@example.com",
     ["Paris", "Berlin"], ["bob@example.com"]),
    ("Check the weather in Tokyo, then email it to ann@example.com and to carl@example.com",
     ["Tokyo"], ["ann@example.com", "carl@example.com"]),
    ("Email bob@example.com the weather in Rome and the weather in Madrid",
     ["Rome", "Madrid"], ["bob@example.com"]),
    ("What's the weather in Lima? Send it to eve@example.com, and also tell dan@example.com",
     ["Lima"], ["eve@example.com", "dan@example.com"]),
    ("Weather in Cairo for alice@example.com and weather in Dubai for bob@example.com, by email",
     ["Cairo", "Dubai"], ["alice@example.com", "bob@example.com"]),
    ("Get the weather in Oslo and in Stockholm and mail them to team@example.com",
     ["Oslo", "Stockholm"], ["team@example.com"]),
]


def parts_done(calls, cities, addresses):
    """The parts of the request the calls do."""
    done = set()
    for name, args in calls:
        text = json.dumps(args).lower()
        if name == "get_weather":
            done |= {("city", c) for c in cities if c.lower() in text}
        if name == "send_email":
            done |= {("to", a) for a in addresses if a in text}
    return done


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local")
    parser.add_argument("--plansmith", default=os.path.join(ROOT, "target/debug/plansmith"))
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="plansmith-goal-")
    store = f"sqlite:{work}/plans.db"
    env = dict(os.environ, XDG_CONFIG_HOME=work, PLANSMITH_OUTBOX=f"{work}/outbox.jsonl")
    weather = ("import json,sys; a=json.load(sys.stdin)['arguments']; c=a.get('city','?'); "
               "print(json.dumps({'city': c, 'temperature': 18, "
               "'summary': f'Sunny, 18 °C in {c}'}))")
    email = ("import json,sys; a=json.load(sys.stdin)['arguments']; "
             "print(json.dumps({'sent': True, 'to': a.get('to')}))")
    commands = os.path.join(work, "commands.json")
    with open(commands, "w") as f:
        json.dump({"tools": {"get_weather": {"command": ["python3", "-c", weather]},
                             "send_email": {"command": ["python3", "-c", email]}}}, f)
    env.pop("PLANSMITH_CONFIG", None)

    def plansmith_json(command):
        """`plansmith COMMAND… --json`: its JSON, or None and the end of its stderr."""
        done = subprocess.run([args.plansmith, *command, "--json"], capture_output=True,
                              text=True, env=env, cwd=ROOT)
        try:
            return json.loads(done.stdout), ""
        except json.JSONDecodeError:
            return None, done.stderr.strip()[-200:]

    missed = completed = 0
    for query, cities, addresses in REQUESTS:
        want = {("city", c) for c in cities} | {("to", a) for a in addresses}
        stored, why = plansmith_json(
            ["plan", query, "--tools", "examples/tools.json", "--model", args.model, "--save",
             "--auto-accept", "--store", store])
        if stored is None:
            print(f"- {query}: no plan ({why})")
            continue
        plan = stored.get("plan") or stored.get("stored", {}).get("plan") or stored
        plan_id = plan.get("id")
        first = [(s["action"].get("name"), s["action"].get("arguments", {}))
                 for s in plan.get("steps", []) if s.get("action", {}).get("type") == "tool"]
        first_done = parts_done(first, cities, addresses)
        report, why = plansmith_json(
            ["run", plan_id, "--store", store, "--commands", commands, "--tools",
             "examples/tools.json", "--model", args.model, "--goal-check"])
        if report is None:
            print(f"- {query}: the run gave no report ({why})")
            continue
        # What ran: the stored plan's completed tool steps, as the run left them.
        shown, why = plansmith_json(["plans", "show", plan_id, "--store", store])
        if shown is None:
            print(f"- {query}: the plan could not be read ({why})")
            continue
        final = shown["plan"]
        ran_calls = [(s["action"].get("name"), s["action"].get("arguments", {}))
                     for s in final["steps"]
                     if s.get("action", {}).get("type") == "tool" and s.get("status") == "completed"]
        after = parts_done(ran_calls, cities, addresses)
        first_missed = want - first_done
        if first_missed:
            missed += 1
            if want <= after:
                completed += 1
        verdict = (report.get("goal_check") or {}).get("verdict")
        print(f"- {query}\n  first plan missed: {sorted(first_missed) or 'nothing'}; "
              f"goal check: {verdict}; replans: {report.get('replans')}; "
              f"stop: {report.get('stop_reason')}; still missing after the run: "
              f"{sorted(want - after) or 'nothing'}")
    print(f"\nfirst plan missed a part: {missed} of {len(REQUESTS)}; "
          f"of those, completed after the goal check's replan: {completed} of {missed}")


if __name__ == "__main__":
    sys.exit(main())
