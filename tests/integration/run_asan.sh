#!/usr/bin/env bash
# tests/integration/run_asan.sh — builds the asan preset's CLI (AddressSanitizer +
# LeakSanitizer + UBSan, see CMakePresets.json) and runs the server's concurrency, fuzz and
# raw-HTTP acceptance tests against it. Each test stops its server with SIGTERM and fails
# unless the server exits 0 with no "ERROR: AddressSanitizer" / "ERROR: LeakSanitizer" /
# UBSan "runtime error:" in its stderr (tests/integration/specula_server.py checks).
# Slow: the asan build takes several minutes on 2 cores; the tests run scaled down (below).
# Usage: tests/integration/run_asan.sh [--no-build] [test names...] (default: concurrency fuzz raw_http)
# Does not: run the GoogleTest suite under ASan, or register itself with ctest.
set -euo pipefail
cd "$(dirname "$0")/../.."

build=1
if [[ "${1:-}" == "--no-build" ]]; then build=0; shift; fi
tests=("$@")
[[ ${#tests[@]} -gt 0 ]] || tests=(concurrency fuzz raw_http)

if [[ $build == 1 ]]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan --target specula_cli
fi
export SPECULA_CLI="$PWD/build/asan/specula"
export SPECULA_FIXTURES_DIR="$PWD/tests/fixtures"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# ASan decodes ~10x slower than release: both cores for the server, a smaller storm
# (12 clients, still with ~600-token prompts and disconnects), a smaller fuzz context.
export SPECULA_TEST_THREADS="${SPECULA_TEST_THREADS:-2}"
export SPECULA_CONC_CLIENTS="${SPECULA_CONC_CLIENTS:-12}"
export SPECULA_CONC_TIMEOUT="${SPECULA_CONC_TIMEOUT:-900}"
export SPECULA_FUZZ_N="${SPECULA_FUZZ_N:-1000}"
export SPECULA_FUZZ_CTX="${SPECULA_FUZZ_CTX:-48}"

status=0
for t in "${tests[@]}"; do
  echo "== asan: test_$t"
  rc=0
  python3 "tests/integration/test_$t.py" || rc=$?
  if [[ $rc == 77 ]]; then
    echo "== asan: test_$t skipped"
  elif [[ $rc != 0 ]]; then
    echo "== asan: test_$t FAILED (exit $rc)"
    status=1
  fi
done
[[ $status == 0 ]] && echo "== asan: all clean" || echo "== asan: FAILURES"
exit $status
