#!/usr/bin/env bash
# Builds llama.cpp's tools — llama-server and llama-speculative-simple (the oracles for the
# serving and speculative-decoding benchmarks), llama-bench, llama-perplexity (the KV cache
# KL-divergence comparison, bench/kld_compare.py) and llama-quantize — from the llama.cpp
# source that llama-cpp-python's PyPI sdist vendors, with GGML_NATIVE=ON, into
# ${SPECULA_CACHE:-~/.cache/specula}/llama.cpp/<version>/bin. Idempotent.
# Usage: tools/build_llama_server.sh [--print-bin-dir]
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${SPECULA_CACHE:-$HOME/.cache/specula}"
ROOT="$CACHE/llama.cpp/$VERSION"
BIN="$ROOT/bin"
if [[ "${1:-}" == "--print-bin-dir" ]]; then echo "$BIN"; exit 0; fi
TOOLS=(llama-server llama-speculative-simple llama-cli llama-bench llama-perplexity llama-quantize)
missing=0
for t in "${TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || missing=1; done
if [[ $missing == 0 ]]; then
  echo "llama.cpp tools present in $BIN" >&2; exit 0
fi
mkdir -p "$ROOT"
cd "$ROOT"
if [[ ! -d src ]]; then
  echo "downloading llama-cpp-python==$VERSION sdist from PyPI" >&2
  python3 -m pip download "llama-cpp-python==$VERSION" --no-deps --no-binary :all: -d dl -q
  tar xzf "dl/llama_cpp_python-$VERSION.tar.gz"
  mv "llama_cpp_python-$VERSION/vendor/llama.cpp" src
  rm -rf "llama_cpp_python-$VERSION" dl
fi
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S src -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON \
  -DBUILD_SHARED_LIBS=OFF "${LAUNCHER[@]}" >&2
cmake --build build --target "${TOOLS[@]}" -j "$(nproc)" >&2
mkdir -p "$BIN"
for t in "${TOOLS[@]}"; do
  cp "build/bin/$t" "$BIN/"
done
echo "built into $BIN" >&2
