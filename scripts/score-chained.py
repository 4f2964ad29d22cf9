"""Scores `plansmith eval plan` predictions on requests whose second tool needs the first
tool's result (examples/eval/chained_cases.jsonl): are the tool steps the expected tools in
order, and is the dependent argument a `{"$ref": ...}` to a step's output rather than a value
the model wrote itself (an invented forecast, price or search result)?

    plansmith eval plan --cases examples/eval/chained_cases.jsonl --out PREDS.jsonl
    python3 scripts/score-chained.py examples/eval/chained_cases.jsonl PREDS.jsonl

The ten cases are a development set (prompt changes were tried on them: README, "Chained
requests"), not a held-out measure. A `$ref` to any step's output counts."""
import json
import sys

cases = {}
for line in open(sys.argv[1]):
    case = json.loads(line)
    cases[case["id"]] = case
total = tools_right = refs = 0
for line in open(sys.argv[2]):
    pred = json.loads(line)
    chain = cases[pred["id"]]["chain"]
    calls = [s for s in pred["plan"] if s.get("type") == "tool"]
    names = [s.get("name") for s in calls]
    right = names == chain["tools"]
    want = chain["ref"]
    values = [s.get("arguments", {}).get(want["argument"]) for s in calls if s.get("name") == want["tool"]]
    ref = any(isinstance(v, dict) and "$ref" in v for v in values)
    total += 1
    tools_right += right
    refs += ref
    shown = json.dumps(values, ensure_ascii=False)[:90]
    print(f"{pred['id']:5} {'tools' if right else '-----'} {'$ref' if ref else '----'} {names} {shown}")
print(f"tools right {tools_right}/{total}; dependent argument passed as $ref {refs}/{total}")
