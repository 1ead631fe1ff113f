#!/usr/bin/env bash
# tools/install_reference.sh — installs the llama.cpp oracle used by tools/
# (fixture generation, peer benchmarks): llama-cpp-python (pinned, built from
# source with the machine's compiler), gguf and numpy, into the python3 that
# runs tools/.
# Idempotent: a no-op when the pinned version and both modules import.
# Does NOT install build tools (run scripts/install_deps.sh first) and is not
# needed to build or test specula itself.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
py=${PYTHON:-python3}

have_all() {
  "$py" - "$LLAMA_CPP_PYTHON_VERSION" <<'PYEOF' >/dev/null 2>&1
import sys
import gguf, numpy  # noqa: F401
import llama_cpp
sys.exit(0 if llama_cpp.__version__ == sys.argv[1] else 1)
PYEOF
}

if have_all; then
  exit 0
fi

# A source build takes a long time on 2 cores; never run two at once.
while pgrep -f "pip install.*llama[-_]cpp[-_]python" >/dev/null 2>&1; do
  echo "[install_reference] another llama-cpp-python install is running; waiting..." >&2
  sleep 30
done
if have_all; then
  exit 0
fi

pip_args=(--disable-pip-version-check)
# Debian's system python refuses plain `pip install` (PEP 668).
if "$py" -c 'import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
  pip_args+=(--break-system-packages)
fi

export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}
echo "[install_reference] installing llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (source build, several minutes), gguf, numpy" >&2
"$py" -m pip install "${pip_args[@]}" numpy gguf
"$py" -m pip install "${pip_args[@]}" --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"

if ! have_all; then
  echo "[install_reference] install finished but 'import llama_cpp' (version $LLAMA_CPP_PYTHON_VERSION), gguf or numpy still fails" >&2
  exit 1
fi
