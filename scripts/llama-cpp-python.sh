#!/usr/bin/env bash
# Installs llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`) into a
# project-local virtual environment, from the pinned, sha256-verified sdist, on the llama.cpp
# shared libraries that scripts/llama-server.sh built from the same sdist (its own llama.cpp
# build is turned off, so llama.cpp is compiled once for both). Used by the providers' end-to-end test of
# tool calling against a real server on loopback (llama.cpp's own server does not constrain a
# forced tool call; llama-cpp-python's `chatml-function-calling` format does).
#
#   scripts/llama-cpp-python.sh      # prints the venv's python
#
# Idempotent: a finished install is reused. Output: $PLANSMITH_TOOLS_DIR (default ~/.cache/plansmith/tools: outside
# the clone, so that a new clone on the same machine, as CI's, reuses the build: ~10 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.3.36 # the sdist pinned in scripts/llama-sdist.sh
root=${PLANSMITH_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/plansmith/tools}
out="$root/llama-cpp-python-$version"
# Reused only while it holds the libraries of the current llama.cpp build (their compiler flags,
# recorded by scripts/llama-server.sh, are the same): the package keeps copies of them.
if [ -x "$out/bin/python" ] && "$out/bin/python" -c "import llama_cpp.server; llama_cpp.llama_backend_init()" 2>/dev/null &&
  cmp -s "$out/llama-flags" "$root/llama.cpp-$version/flags"; then
  echo "$out/bin/python"
  exit 0
fi
command -v cmake >/dev/null 2>&1 || bash scripts/setup.sh >&2

tools=$(bash scripts/llama-server.sh)

work=$(mktemp -d "${TMPDIR:-/tmp}/plansmith-llama-cpp-python.XXXXXX")
trap 'rm -rf "$work"' EXIT
sdist=$(bash scripts/llama-sdist.sh "$work")
python="${PLANSMITH_PYTHON:-python3}"
# Built in place (a venv records its path); a failed install is removed, so a later run starts
# clean and the check at the top never accepts half an install.
rm -rf "$out"
"$python" -m venv "$out" >&2
echo "llama-cpp-python: installing llama-cpp-python $version on $tools/lib" >&2
CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  "$out/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
  "$sdist[server]" >"$work/pip.log" 2>&1 || {
  tail -60 "$work/pip.log" >&2
  rm -rf "$out"
  exit 1
}
# The package loads its libraries from llama_cpp/lib (they find each other there: $ORIGIN).
pkg=$("$out/bin/python" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("llama_cpp").origin))')
mkdir -p "$pkg/lib"
cp -P "$tools"/lib/*.so* "$pkg/lib/"
cp "$tools/flags" "$out/llama-flags"
"$out/bin/python" -c "import llama_cpp.server; llama_cpp.llama_backend_init()" || {
  echo "llama-cpp-python: the installed server does not import" >&2
  rm -rf "$out"
  exit 1
}
echo "$out/bin/python"
