#!/usr/bin/env bash
# Downloads the pinned llama-cpp-python sdist (it vendors llama.cpp) into DIR with pip and
# verifies its sha256; prints the file's path. Shared by scripts/llama-server.sh and
# scripts/llama-cpp-python.sh.
#
#   scripts/llama-sdist.sh DIR
set -euo pipefail
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
dir=${1:?usage: scripts/llama-sdist.sh DIR}
python="${PLANSMITH_PYTHON:-python3}"
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
  "llama-cpp-python==$version" -d "$dir" >&2
sdist="$dir/llama_cpp_python-$version.tar.gz"
echo "$sha256  $sdist" | sha256sum --check --quiet - || {
  echo "llama-sdist: sha256 mismatch for llama-cpp-python $version" >&2
  exit 1
}
echo "$sdist"
