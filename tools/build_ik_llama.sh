#!/usr/bin/env bash
# Builds ik_llama.cpp's llama-bench (and llama-server when its web UI assets are present) with
# GGML_NATIVE=ON into ${SPECULA_CACHE:-~/.cache/specula}/ik_llama.cpp/bin — for the kernel
# benchmarks only (docs/BENCHMARKS.md); CI never builds it. ik_llama.cpp is not on PyPI, so
# this takes a checkout of https://github.com/ikawrakow/ik_llama.cpp (git clone, or any copy of
# its source tree) as its argument; it is copied once to .../ik_llama.cpp/src. Idempotent.
# Usage: tools/build_ik_llama.sh [SOURCE_DIR] | --print-bin-dir
set -euo pipefail
CACHE="${SPECULA_CACHE:-$HOME/.cache/specula}"
ROOT="$CACHE/ik_llama.cpp"
BIN="$ROOT/bin"
if [[ "${1:-}" == "--print-bin-dir" ]]; then echo "$BIN"; exit 0; fi
if [[ -x "$BIN/llama-bench" ]]; then echo "ik_llama.cpp llama-bench present in $BIN" >&2; exit 0; fi
mkdir -p "$ROOT"
if [[ ! -f "$ROOT/src/CMakeLists.txt" ]]; then
  SRC="${1:?usage: tools/build_ik_llama.sh SOURCE_DIR (a checkout of ikawrakow/ik_llama.cpp)}"
  mkdir -p "$ROOT/src"
  cp -a "$SRC/." "$ROOT/src/"
fi
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$ROOT/src" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF "${LAUNCHER[@]}" >&2
cmake --build "$ROOT/build" --target llama-bench -j "$(nproc)" >&2
mkdir -p "$BIN"
cp "$ROOT/build/bin/llama-bench" "$BIN/"
echo "built into $BIN" >&2
