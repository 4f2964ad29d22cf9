#!/usr/bin/env bash
# Builds llama.cpp's own tools — `llama-server` (an OpenAI-compatible HTTP server) and
# `llama-bench` — from the llama.cpp sources vendored in a pinned llama-cpp-python sdist,
# fetched with pip (sha256-verified). Used by the providers' end-to-end test (a real server on
# loopback, not a mock) and by the embedded model's speed comparison.
#
#   scripts/llama-server.sh          # prints the directory holding bin/llama-server
#
# The libraries are shared (lib/libllama.so, lib/libggml*.so, found through the binaries'
# `$ORIGIN/../lib` rpath): scripts/llama-cpp-python.sh installs llama-cpp-python on these same
# libraries instead of compiling llama.cpp a second time (~7 min of a CI run on 2 cores).
#
# Idempotent: a finished build is reused. Output: $PLANSMITH_TOOLS_DIR (default ~/.cache/plansmith/tools: outside
# the clone, so that a new clone on the same machine, as CI's, reuses the build: ~10 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.3.36 # the sdist pinned in scripts/llama-sdist.sh
root=${PLANSMITH_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/plansmith/tools}
out="$root/llama.cpp-$version"
# Built for this machine (GGML_NATIVE) but without ggml's AMX kernels: on a Xeon with AMX (a
# development machine on 2026-12-01) `-march=native` compiles them in, and llama-server crashed
# in ggml_backend_amx_mul_mat (SIGSEGV) loading SmolLM2's Q4_1 weights. An explicit -mno-* wins
# over what -march=native turns on, whatever their order. `--version` below loads no model, so
# the start check cannot see such a crash; the provider tests do. A build made with other flags
# (the `flags` file) is not reused.
flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
if [ -x "$out/bin/llama-server" ] && [ -x "$out/bin/llama-bench" ] && [ -e "$out/lib/libllama.so" ] &&
  [ "$(cat "$out/flags" 2>/dev/null)" = "$flags" ]; then
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
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGIN' \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_CURL=OFF -DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" \
  >"$work/cmake.log" 2>&1 || {
  tail -40 "$work/cmake.log" >&2
  exit 1
}
cmake --build "$work/build" --config Release -j "$(nproc)" --target llama-server llama-bench \
  >"$work/build.log" 2>&1 || {
  tail -60 "$work/build.log" >&2
  exit 1
}
# Assembled beside the output under a name of its own, then moved in place: two runs at once
# (two clones on one machine share the cache) never mix their files.
partial="$out.partial.$$"
mkdir -p "$partial/bin" "$partial/lib"
cp "$work/build/bin/llama-server" "$work/build/bin/llama-bench" "$partial/bin/"
find "$work/build" -name '*.so*' \( -type f -o -type l \) -exec cp -P {} "$partial/lib/" \;
"$partial/bin/llama-server" --version >/dev/null 2>&1 || {
  echo "llama-server: the built server does not start (libraries: $(ls "$partial/lib"))" >&2
  exit 1
}
echo "$flags" >"$partial/flags"
rm -rf "$out"
mv "$partial" "$out"
echo "$out"
