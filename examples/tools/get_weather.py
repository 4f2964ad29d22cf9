#!/usr/bin/env python3
"""Stand-in for `get_weather` (examples/tools.json) in examples/commands.json: a command tool
reads the call as JSON on stdin ({"tool", "arguments", "idempotency_key", ...}) and writes its
result as JSON on stdout; a non-zero exit is a failure. This one calls no weather service (the
examples run offline): it answers that it has no forecast. Map `get_weather` to a real service
in your own commands file."""

import json
import sys

call = json.load(sys.stdin)
args = call.get("arguments") or {}
city = args.get("city")
if not isinstance(city, str) or not city.strip():
    print("get_weather: `city` is missing", file=sys.stderr)
    sys.exit(2)
unit = args.get("unit", "celsius")
json.dump(
    {
        "city": city,
        "unit": unit,
        "summary": f"No forecast for {city}: examples/tools/get_weather.py is an offline "
        "stand-in that calls no weather service.",
    },
    sys.stdout,
)
