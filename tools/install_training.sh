#!/usr/bin/env bash
# tools/install_training.sh — the PyTorch tooling of tools/ in its own virtual environment
# (default ~/.cache/specula/train-venv; TRAIN_VENV overrides): torch (PyPI's wheel, which
# runs on the CPU), transformers, peft, safetensors, gguf, numpy. Used by
#   - tools/make_lora_fixtures.py (llama.cpp's convert_lora_to_gguf.py turns the PEFT
#     fixtures into the GGUF adapters llama.cpp judges; it imports torch and transformers),
#   - tools/train_lora.py (a rank-16 adapter trained on Qwen2.5-Coder 0.5B).
# About 5.5 GB. Not needed to build or test specula. Idempotent: a no-op when the pinned
# versions import. Prints the venv's python.
set -euo pipefail

venv=${TRAIN_VENV:-$HOME/.cache/specula/train-venv}
pins=(torch==2.15.0 transformers==5.25.0 peft==0.21.2 safetensors numpy gguf sentencepiece)

ok() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - <<'PYEOF' >/dev/null 2>&1
import torch, transformers, peft, safetensors, numpy, gguf  # noqa: F401
assert torch.__version__.startswith("2.15.0") and transformers.__version__ == "5.25.0" and peft.__version__ == "0.21.2"
PYEOF
}

if ! ok; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check -q "${pins[@]}"
  ok || { echo "[install_training] the packages do not import from $venv" >&2; exit 1; }
fi
echo "$venv/bin/python"
