# shellcheck shell=bash
# Sourced by .ci/run: llama-cpp-python's OpenAI-compatible server (scripts/llama-cpp-python.sh),
# for the providers' end-to-end tool-calling test against a real server on loopback.
# Under CI=true that test fails when PLANSMITH_LLAMA_CPP_PYTHON is missing.
PLANSMITH_LLAMA_CPP_PYTHON=$(bash scripts/llama-cpp-python.sh)
export PLANSMITH_LLAMA_CPP_PYTHON
echo "ci: llama-cpp-python: $PLANSMITH_LLAMA_CPP_PYTHON"
