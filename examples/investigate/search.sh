#!/bin/sh
# A stand-in for a search tool, for `plansmith plan --investigate`: reads the query on stdin and
# prints the paragraphs of notes.txt (next to this script) that mention a word of the query
# longer than three letters. Each paragraph is one finding. Replace it with a real search: any
# command that prints paragraphs, or JSON [{"source", "title", "content"}], works.
query=$(cat)
dir=$(dirname "$0")
words=$(printf '%s\n' "$query" | tr -cs 'A-Za-z0-9' '\n' | awk 'length($0) > 3')
awk -v RS= -v words="$words" '
  BEGIN { n = split(tolower(words), w, "\n") }
  { p = tolower($0); for (i = 1; i <= n; i++) if (w[i] != "" && index(p, w[i])) { print $0 "\n"; break } }
' "$dir/notes.txt"
