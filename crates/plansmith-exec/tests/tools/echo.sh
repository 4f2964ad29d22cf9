#!/bin/sh
# Test tool: answers the call it got (tool, arguments, idempotency key, inputs, …).
cat
