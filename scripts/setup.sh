#!/usr/bin/env bash
# Installs what building plansmith needs beyond the Rust toolchain: cmake and libclang for the
# embedded llama.cpp (Debian packages). Safe to run again; does nothing when all is present.
set -euo pipefail
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v clang >/dev/null 2>&1 || need+=(clang)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v python3 >/dev/null 2>&1 || { echo "setup: python3 with pip is needed to fetch model weights" >&2; exit 1; }
echo "setup: ready"
