#!/usr/bin/env bash
# Builds llama.cpp's own tools — `llama-server` (an OpenAI-compatible HTTP server) and
# `llama-bench` — from the llama.cpp sources vendored in a pinned llama-cpp-python sdist,
# fetched with pip (sha256-verified). Used by the providers' end-to-end test (a real server on
# loopback, not a mock) and by the embedded model's speed comparison.
#
#   scripts/llama-server.sh          # prints the directory holding bin/llama-server
#
# Idempotent: a finished build is reused. Output: $PLANSMITH_TOOLS_DIR (default target/tools).
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.3.36 # the sdist pinned in scripts/llama-sdist.sh
root=${PLANSMITH_TOOLS_DIR:-$PWD/target/tools}
out="$root/llama.cpp-$version"
if [ -x "$out/bin/llama-server" ] && [ -x "$out/bin/llama-bench" ]; then
  echo "$out"
  exit 0
fi
command -v cmake >/dev/null 2>&1 || bash scripts/setup.sh >&2

work=$(mktemp -d "${TMPDIR:-/tmp}/plansmith-llama-server.XXXXXX")
trap 'rm -rf "$work"' EXIT
sdist=$(bash scripts/llama-sdist.sh "$work")
tar xzf "$sdist" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
echo "llama-server: building llama.cpp tools (a few minutes)" >&2
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_CURL=OFF -DGGML_NATIVE=ON >"$work/cmake.log" 2>&1 || {
  tail -40 "$work/cmake.log" >&2
  exit 1
}
cmake --build "$work/build" --config Release -j "$(nproc)" --target llama-server llama-bench \
  >"$work/build.log" 2>&1 || {
  tail -60 "$work/build.log" >&2
  exit 1
}
mkdir -p "$out.partial/bin"
cp "$work/build/bin/llama-server" "$work/build/bin/llama-bench" "$out.partial/bin/"
rm -rf "$out"
mv "$out.partial" "$out"
echo "$out"
