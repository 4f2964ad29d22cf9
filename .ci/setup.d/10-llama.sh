# Build dependencies of the embedded llama.cpp (cmake, clang, libclang-dev).
bash scripts/setup.sh
