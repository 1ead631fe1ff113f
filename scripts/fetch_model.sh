#!/usr/bin/env bash
# scripts/fetch_model.sh — installs a known model (default: gemma3-270m) into
# ${SPECULA_MODELS:-~/.cache/specula/models}. Thin wrapper over
# scripts/fetch_model.py, which holds the model table and does the work.
# Usage: scripts/fetch_model.sh [NAME ...] [--list] [--print-path]
set -euo pipefail
exec python3 "$(dirname "$0")/fetch_model.py" "$@"
