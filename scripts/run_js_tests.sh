#!/usr/bin/env bash
# scripts/run_js_tests.sh node|bun — runs the JS package's tests (js/test/run.mjs) under one
# runtime; exit 77 (skipped) when npm has not installed js/'s dependencies yet (scripts/test
# does) or the addon is not built.
set -euo pipefail
cd "$(dirname "$0")/../js"
rt="${1:?usage: run_js_tests.sh node|bun}"
addon="${SPECULA_NODE_ADDON:-build/specula.node}"
if [[ ! -d node_modules ]] || [[ ! -f "$addon" ]]; then
  echo "skip: run 'npm install' in js/ first (scripts/test does)"
  exit 77
fi
case "$rt" in
  node) exec node test/run.mjs ;;
  bun) exec node_modules/.bin/bun test/run.mjs ;;
  *) echo "unknown runtime $rt" >&2; exit 2 ;;
esac
