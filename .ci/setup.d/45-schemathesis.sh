# shellcheck shell=bash
# Sourced by .ci/run: schemathesis (PyPI, pinned, project-local venv; scripts/schemathesis.sh)
# for the OpenAPI-driven fuzz run against a real `plansmith serve`. Under CI=true that test
# fails when PLANSMITH_TEST_SCHEMATHESIS is missing.
PLANSMITH_TEST_SCHEMATHESIS=$(bash scripts/schemathesis.sh)
export PLANSMITH_TEST_SCHEMATHESIS
echo "ci: schemathesis: $PLANSMITH_TEST_SCHEMATHESIS"
