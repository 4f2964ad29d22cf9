#!/usr/bin/env python3
"""Stand-in for `send_email` (examples/tools.json) in examples/commands.json: sends nothing,
appends the message as one JSON line to an outbox file instead ($PLANSMITH_OUTBOX, default
plansmith-outbox.jsonl in the temporary directory). It honours the call's idempotency key, as
a side-effecting tool should: a retried or re-run call (same key) does not add the message
twice."""

import json
import os
import sys
import tempfile

call = json.load(sys.stdin)
args = call.get("arguments") or {}
key = call.get("idempotency_key") or os.environ.get("PLANSMITH_IDEMPOTENCY_KEY", "")
missing = [name for name in ("to", "subject", "body") if name not in args]
if missing:
    print(f"send_email: missing {', '.join(missing)}", file=sys.stderr)
    sys.exit(2)
outbox = os.environ.get("PLANSMITH_OUTBOX") or os.path.join(
    tempfile.gettempdir(), "plansmith-outbox.jsonl"
)
sent = False
if os.path.exists(outbox):
    with open(outbox, encoding="utf-8") as lines:
        sent = any(json.loads(line).get("idempotency_key") == key for line in lines if line.strip())
if not sent:
    message = {name: args[name] for name in ("to", "subject", "body")}
    message["idempotency_key"] = key
    with open(outbox, "a", encoding="utf-8") as out:
        out.write(json.dumps(message) + "\n")
json.dump({"queued": True, "outbox": outbox, "message_id": key}, sys.stdout)
