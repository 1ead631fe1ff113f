#!/usr/bin/env bash
# scripts/build.sh — configures and builds specula with the `release` CMake
# preset (Ninja, ccache when installed) into build/release.
# Does NOT install dependencies (scripts/install_deps.sh) or fetch models.
# Usage: scripts/build.sh [extra `cmake --build` args, e.g. --target specula_cli]
set -euo pipefail
cd "$(dirname "$0")/.."

cmake --preset release >/dev/null
jobs=${SPECULA_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}
cmake --build --preset release -j "$jobs" "$@"
