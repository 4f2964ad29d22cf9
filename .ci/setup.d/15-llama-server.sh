# shellcheck shell=bash
# Sourced by .ci/run: llama.cpp's own server and bench tools (scripts/llama-server.sh), for the
# providers' end-to-end test against a real OpenAI-compatible server on loopback.
# Under CI=true that test fails when PLANSMITH_LLAMA_SERVER is missing.
ci_llama_tools=$(bash scripts/llama-server.sh)
export PLANSMITH_LLAMA_SERVER="$ci_llama_tools/bin/llama-server"
echo "ci: llama-server: $PLANSMITH_LLAMA_SERVER"
