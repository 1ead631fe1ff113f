"""tools/mlx_f64_reference.py — the float64 reference for MLX-quantized folders: the logits of the
dequantized weights (w = scale * q + bias, as MLX defines affine quantization) computed in float64
by tools/arch_f64_reference.py's independent numpy forward, compared with another engine's float32
logits of the MLX folder.

The MLX models are those of tools/make_hf_folders.py (mlx*: qwen2_w quantized the way mlx-lm stores
it); their dequantized weights are the f32 folder hf_<name>_deq/ it writes beside each. The forward
takes the architecture and metadata from the base model's GGUF (arch_qwen2_w.gguf) and every weight
from that folder (HF names mapped back to GGUF ones; qwen2 stores them as they are).

Usage: python3 tools/mlx_f64_reference.py --models DIR --name mlx4_g32 --ids 5,17,300 --compare-bin F
  F: float32 logits [len(ids), n_vocab], row-major (teacher forced over ids). Prints one JSON line:
  {"positions", "max_abs", "rel_rms", "top1"} of F against the float64 logits.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch_f64_reference as ref  # noqa: E402
import make_hf_folders as mhf  # noqa: E402


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, il, rest = hf.split(".", 3)
    inverse = {v: k for k, v in mhf.LAYER_NAMES.items()}
    return f"blk.{il}.{inverse[rest]}"


def f64_logits(models, name, ids):
    from safetensors.numpy import load_file

    hf_arch, opts = mhf.HF_MODELS[name]
    if hf_arch != "Qwen2ForCausalLM":
        raise SystemExit(f"{name}: only the qwen2 MLX models are mapped back here")
    m = ref.Model(os.path.join(models, f"arch_{opts.get('base', name)}.gguf"))
    deq = load_file(os.path.join(models, f"hf_{name}_deq", "model.safetensors"))
    for k, v in deq.items():
        g = gguf_name(k)
        assert g in m.t and m.t[g].shape == v.shape, (k, g)
        m.t[g] = v.astype(np.float64)
    return ref.forward(m, ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--compare-bin", required=True)
    a = ap.parse_args()
    ids = [int(x) for x in a.ids.split(",")]
    lg = f64_logits(a.models, a.name, ids)
    got = np.fromfile(a.compare_bin, dtype=np.float32).astype(np.float64).reshape(lg.shape)
    d = got - lg
    out = {"positions": len(ids), "max_abs": float(np.abs(d).max()),
           "rel_rms": float(np.sqrt((d * d).sum() / (lg * lg).sum())),
           "top1": int((got.argmax(-1) == lg.argmax(-1)).sum())}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
