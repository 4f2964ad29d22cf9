#!/usr/bin/env bash
# Installs schemathesis (PyPI, pinned) into a project-local virtual environment, for the
# OpenAPI-driven fuzz test of `plansmith serve` (crates/plansmith/tests/cli/fuzz.rs).
#
#   scripts/schemathesis.sh      # prints the path of the `schemathesis` command
#
# Idempotent: a finished install is reused. Output: $PLANSMITH_TOOLS_DIR (default target/tools).
set -euo pipefail
cd "$(dirname "$0")/.."

version=4.32.5
root=${PLANSMITH_TOOLS_DIR:-$PWD/target/tools}
out="$root/schemathesis-$version"
if [ -x "$out/bin/schemathesis" ] && "$out/bin/schemathesis" --version >/dev/null 2>&1; then
  echo "$out/bin/schemathesis"
  exit 0
fi
python="${PLANSMITH_PYTHON:-python3}"
# A failed install is removed, so a later run starts clean and the check above never accepts
# half an install.
rm -rf "$out"
mkdir -p "$root"
"$python" -m venv "$out" >&2
"$out/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
  "schemathesis==$version" >&2 || {
  rm -rf "$out"
  exit 1
}
"$out/bin/schemathesis" --version >&2 || {
  echo "schemathesis: the installed command does not run" >&2
  rm -rf "$out"
  exit 1
}
echo "$out/bin/schemathesis"
