#!/bin/sh
# A stand-in for a search tool: reads the query on stdin and prints findings as JSON.
# Any command that does this works with `plansmith plan --investigate`.
query=$(cat)
cat <<JSON
[
  {"source": "web_search", "text": "Battery-electric cars were 15.4 % of new EU registrations in 2025 (query: $query)."},
  {"source": "web_search", "text": "Tesla, Volkswagen Group and BYD led European BEV sales in 2025."}
]
JSON
