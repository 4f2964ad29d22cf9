#!/bin/sh
# Test tool that does its work in a child process, as most scripts do: starts `sleep $2`
# (default 60) in the background, writes that child's pid to the file $1, and waits for it.
cat >/dev/null
sleep "${2:-60}" &
echo $! >"$1"
wait
