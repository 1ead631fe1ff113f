#!/usr/bin/env bash
# run_llama_server_suite.sh — llama.cpp's own server test suite (tools/server/tests) against
# specula, or against the native llama-server on the same local models.
#
#   tests/compat/run_llama_server_suite.sh specula [pytest args]   # specula serve
#   tests/compat/run_llama_server_suite.sh native  [pytest args]   # $LLAMA_SERVER_NATIVE
#
# The suite comes from the llama.cpp source vendored in the llama-cpp-python sdist (PyPI;
# $LLAMA_CPP_SRC to use another checkout); it runs in a venv of its own requirements under
# build/compat. llama_server_launcher.py stands in for the llama-server binary: it maps the
# suite's flags and Hugging Face model names to specula serve and the local models (this
# machine reaches no model hub). Results: build/compat/<engine>.xml (JUnit) and a summary
# line; tests/compat/compare.py puts the two runs side by side. Not part of CI: it needs
# the models (specula pull) and ~30 minutes. The native llama-server is built from the same
# source (tools/build_llama_server.sh; LLAMA_SERVER_NATIVE=$(tools/build_llama_server.sh --print-bin-dir)/llama-server).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ENGINE=${1:?usage: run_llama_server_suite.sh specula|native [pytest args]}
shift
OUT=$ROOT/build/compat
mkdir -p "$OUT"
LLAMA_CPP_PY_VERSION=${LLAMA_CPP_PY_VERSION:-0.3.36}
if [ -z "${LLAMA_CPP_SRC:-}" ]; then
  LLAMA_CPP_SRC=$OUT/llama_cpp_python-$LLAMA_CPP_PY_VERSION/vendor/llama.cpp
  if [ ! -d "$LLAMA_CPP_SRC" ]; then
    python3 -m pip download --quiet --no-binary :all: --no-deps -d "$OUT" "llama-cpp-python==$LLAMA_CPP_PY_VERSION"
    tar -xzf "$OUT/llama_cpp_python-$LLAMA_CPP_PY_VERSION.tar.gz" -C "$OUT"
  fi
fi
TESTS=$LLAMA_CPP_SRC/tools/server/tests
if [ ! -x "$OUT/venv/bin/pytest" ]; then
  python3 -m venv "$OUT/venv"
  "$OUT/venv/bin/pip" install --quiet -r "$TESTS/requirements.txt"
fi
MODELS=${SPECULA_MODELS:-$HOME/.cache/specula/models}
mkdir -p "$TESTS/tmp"
# The speculative tests' draft model, "downloaded" by the suite to ./tmp: a local model
# with the target's vocabulary.
ln -sf "$MODELS/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" "$TESTS/tmp/stories15M-q4_0.gguf"
export LLAMA_SERVER_BIN_PATH=$ROOT/tests/compat/llama_server_launcher.py
export SPECULA_MODELS=$MODELS
case "$ENGINE" in
  specula) export SPECULA_BIN=${SPECULA_BIN:-$ROOT/build/release/specula}; unset LLAMA_SERVER_NATIVE ;;
  native) : "${LLAMA_SERVER_NATIVE:?set LLAMA_SERVER_NATIVE to a llama-server binary}"; export LLAMA_SERVER_NATIVE ;;
  *) echo "engine must be specula or native" >&2; exit 2 ;;
esac
cd "$TESTS"
set +e
PYTHONPATH=$ROOT/tests/compat "$OUT/venv/bin/pytest" -q -p no:cacheprovider -p compat_plugin -m "not slow" -o junit_family=xunit1 --junitxml="$OUT/$ENGINE.xml" "$@" \
  > "$OUT/$ENGINE.log" 2>&1
rc=$?
set -e
tail -3 "$OUT/$ENGINE.log"
exit $rc
