#!/bin/sh
# Test tool: answers a fixed list of items.
cat >/dev/null
echo '{"items": [{"id": "a1"}, {"id": "a2"}]}'
