"""Independent check of eval predictions: every tool step names a tool of the case and its
arguments validate against that tool's input_schema (JSON Schema, python-jsonschema).

    python3 scripts/eval-validity.py ../shared/eval/data/bfcl_cases.jsonl PREDS.jsonl [MORE.jsonl]

Needs the `jsonschema` Python package (Debian: python3-jsonschema)."""
import json, sys, collections
import jsonschema

cases = {}
for line in open(sys.argv[1]):
    c = json.loads(line)
    cases[c['id']] = c
for path in sys.argv[2:]:
    stats = collections.defaultdict(lambda: collections.Counter())
    seen = set()
    for line in open(path):
        p = json.loads(line)
        if p['id'] in seen:
            continue
        seen.add(p['id'])
        case = cases[p['id']]
        cat = case['category']
        tools = {t['name']: t for t in case['tools']}
        st = stats[cat]
        st['cases'] += 1
        steps = p['plan']
        if not steps:
            st['empty'] += 1
        ok = True
        for s in steps:
            if s['type'] != 'tool':
                continue
            st['tool_steps'] += 1
            t = tools.get(s['name'])
            if t is None:
                ok = False; st['unknown_tool'] += 1; continue
            v = jsonschema.Draft202012Validator(t.get('input_schema') or {'type': 'object'})
            errs = [e for e in v.iter_errors(s['arguments'])
                    # `{"$ref": "sN.output…"}` is plansmith's reference to an earlier result
                    if not (isinstance(e.instance, dict) and set(e.instance) == {'$ref'})]
            missing = [e for e in errs if e.validator == 'required']
            if missing:
                st['missing_required'] += 1  # the engine asks a question: plan not ready
            if len(errs) > len(missing):
                ok = False; st['invalid_args'] += 1
        st['valid_plans'] += ok
    print(path)
    tot = collections.Counter()
    for cat, st in stats.items():
        tot.update(st)
        print(f"  {cat:14} cases {st['cases']:4} valid {st['valid_plans']:4} ({100*st['valid_plans']/st['cases']:.1f} %) empty {st['empty']:3} tool steps {st['tool_steps']:4} unknown {st['unknown_tool']} bad-args {st['invalid_args']} missing-required {st['missing_required']}")
    print(f"  {'ALL':14} cases {tot['cases']:4} valid {tot['valid_plans']:4} ({100*tot['valid_plans']/max(1,tot['cases']):.1f} %) empty {tot['empty']:3}")
