#!/usr/bin/env bash
# scripts/build_llguidance.sh OUT_DIR — builds the llguidance crate (structured-output
# token masks; third_party/llguidance wraps it, versions pinned by its Cargo.lock) as one
# static library with its C header:
#   OUT_DIR/lib/libspecula_llguidance.a, OUT_DIR/include/llguidance.h
# Called by CMake at configure time. Needs cargo/rustc >= 1.87 (rustup's toolchain);
# the crates come from crates.io. Compiled objects are kept across clones in
# ${SPECULA_CACHE:-~/.cache/specula}/cargo/llguidance-target (first build ~2.5 min on
# 2 cores; later ones are a no-op).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: build_llguidance.sh OUT_DIR}"
manifest="$root/third_party/llguidance/Cargo.toml"
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "build_llguidance: cargo not found: specula's structured outputs need Rust >= 1.87 (rustup) to build the llguidance crate" >&2
  exit 1
fi
cache="${SPECULA_CACHE:-$HOME/.cache/specula}"
export CARGO_TARGET_DIR="$cache/cargo/llguidance-target"
mkdir -p "$CARGO_TARGET_DIR" "$out/lib" "$out/include"
if [ ! -f "$CARGO_TARGET_DIR/release/libspecula_llguidance.a" ]; then
  echo "[build_llguidance] building the llguidance crate with cargo (first time: 1-2.5 minutes on 2 cores)" >&2
fi
cargo build --quiet --release --locked --manifest-path "$manifest" >&2
# The header ships in the crate's own source folder; cargo metadata says where.
crate_dir="$(cargo metadata --format-version 1 --locked --manifest-path "$manifest" |
  python3 -c 'import json,sys,os; m=json.load(sys.stdin); print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"]=="llguidance"))')"
cp -f "$crate_dir/llguidance.h" "$out/include/llguidance.h.new"
cp -f "$CARGO_TARGET_DIR/release/libspecula_llguidance.a" "$out/lib/libspecula_llguidance.a.new"
# Replace only when changed, so that an up-to-date build does not relink.
for f in "$out/include/llguidance.h" "$out/lib/libspecula_llguidance.a"; do
  if cmp -s "$f.new" "$f"; then rm -f "$f.new"; else mv -f "$f.new" "$f"; fi
done
