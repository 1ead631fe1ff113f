#!/usr/bin/env bash
# scripts/install_deps.sh — installs the Debian 12 packages needed to build and
# test specula (compiler, CMake, Ninja, ccache, GoogleTest/GoogleMock, Google
# Benchmark, nlohmann-json, CLI11, PCRE2 (BPE pre-tokenizer regexes), Boost 1.74 headers (Beast/Asio:
# the HTTP server), cpp-httplib (the unit tests' HTTP client), zlib (prompt cache
# checksums), OpenSSL (sha256 of downloads, https), utf8proc (Unicode normalization for tokenizer.json normalizers), Python 3 with pip, tmux (the
# interactive `specula chat` test drives a terminal), Node.js with npm (the JS package),
# Chromium (the chat page's test drives it headless), clang 19 with its compiler-rt (libFuzzer
# and the sanitizers: the fuzz targets of fuzz/, scripts/fuzz).
# Idempotent: a fast no-op (one dpkg-query) when everything is present; runs
# `apt-get update` at most once, and only when something is missing.
# Does NOT install Python packages (see tools/install_reference.sh) or models
# (see scripts/fetch_model.sh).
set -euo pipefail

packages=(build-essential cmake ninja-build ccache git python3
          libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
          pkg-config libpcre2-dev libboost1.74-dev libcpp-httplib-dev zlib1g-dev libutf8proc-dev libssl-dev
          tmux chromium clang-19 libclang-rt-19-dev)

# One dpkg-query for all packages; a package it does not know prints nothing.
declare -A installed=()
while read -r name state; do
  [[ "$state" == "install ok installed" ]] && installed["${name%%:*}"]=1
done < <(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for pkg in "${packages[@]}"; do
  [[ -n "${installed[$pkg]:-}" ]] || missing+=("$pkg")
done
# pip: only when no pip works for python3 (it may come from pyenv, a venv, ...).
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c "import pip" >/dev/null 2>&1; then
  status=$(dpkg-query -W -f='${Status}' python3-pip 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=(python3-pip)
fi
# venv (scripts/cluster installs the router into build/router-venv): Debian's python3
# has it only with python3-venv.
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c "import ensurepip, venv" >/dev/null 2>&1; then
  status=$(dpkg-query -W -f='${Status}' python3-venv 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=(python3-venv)
fi

# Node.js and npm (the npm package js/ and its tests; Bun comes from npm as a dev
# dependency): Debian's, only when no `node` / `npm` works (they may come from elsewhere,
# e.g. NodeSource's nodejs, which bundles npm and conflicts with Debian's npm package).
if ! command -v node >/dev/null 2>&1; then
  missing+=(nodejs)
fi
if ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi

# Rust (cargo, rustc >= 1.87) builds the llguidance crate (structured outputs,
# scripts/build_llguidance.sh). It comes from rustup (~/.cargo/bin), not apt: Debian 12's
# cargo is 1.63, too old for the crate.
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
  echo "[install_deps] warning: cargo/rustc not found: the build needs Rust >= 1.87 (rustup) for the llguidance crate" >&2
else
  rv="$(rustc --version | awk '{print $2}')"
  if [[ "$(printf '%s\n1.87.0\n' "$rv" | sort -V | head -n1)" != "1.87.0" ]]; then
    echo "[install_deps] warning: rustc $rv is older than 1.87 (the llguidance crate needs 1.87; use rustup)" >&2
  fi
fi

if (( ${#missing[@]} == 0 )); then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "[install_deps] missing packages: ${missing[*]}; apt-get not found (this script targets Debian 12)" >&2
  exit 1
fi
sudo_cmd=()
if [[ "$(id -u)" != 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "[install_deps] missing packages: ${missing[*]}; not root and sudo not available" >&2
    exit 1
  fi
fi

echo "[install_deps] installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update
"${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
