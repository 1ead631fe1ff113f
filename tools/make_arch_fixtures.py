#!/usr/bin/env python3
"""tools/make_arch_fixtures.py — tiny random-weight GGUF files for the llama.cpp architectures
llama, qwen3, qwen3moe, phi3, gemma2, smollm3 and gemma4 (plus the llama architecture stored
as Q2_K, Q3_K, IQ4_NL and IQ4_XS), and llama.cpp's outputs on them as the oracle.

No real weights are reachable here, so every model is written from a fixed seed with the `gguf`
package, with the tensor names, shapes and metadata keys that the loader of the llama.cpp
vendored by llama-cpp-python reads (src/models/<arch>.cpp; docs/ARCH_FACTS.md lists them).
Each architecture has two or more shapes that differ in geometry: GQA ratios 1 to 4, head_dim
set apart from n_embd / n_head through attention.key_length, odd widths (96, 160), tied and
untied output, f32 and f16 matrices. SHAPES below says what each one exercises.

The quantized models need block formats that the gguf package cannot write, so this file has
small round-to-nearest encoders for Q2_K, Q3_K, IQ4_NL and IQ4_XS (block layouts as
gguf/quants.py dequantizes them, which follows ggml-common.h); each encoded matrix is checked
against gguf.quants.dequantize (relative RMS error bounds in QUANT_MAX_ERR).

Usage:
  python3 tools/make_arch_fixtures.py --models-only --out DIR [--check] [--only NAME,NAME]
      writes DIR/arch_<name>.gguf for every model (or the named ones); numpy + gguf only, the
      tests run this at test time — weights are never committed. --check fails unless each file
      is byte for byte the one the committed fixture was made from (sha256);
  python3 tools/make_arch_fixtures.py [--only NAME,NAME]
      also runs llama.cpp (llama-cpp-python, tools/install_reference.sh) on them and writes
      tests/fixtures/arch_reference.json (with --only, replaces just those models in it): per
      model its arch, a shape line and the sha256, and per prompt the prompt ids, llama.cpp's
      24-token greedy continuation and, at every position of prompt + continuation (teacher
      forced), the argmax, the top 8 ids with logits, and the logits of 16 fixed probe ids.
llama.cpp runs on the CPU with its default f16 KV cache and no flash attention, n_ctx 256, and
without its extra CPU buffer types (no weight repacking, no AMX: the plain ggml kernels; the AMX
path crashes on IQ4_XS on this machine).
"""
import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np

from llama_oracle import check_models, greedy_and_teacher_forced, no_extra_buffers, sha256, write_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "fixtures", "arch_reference.json")

F32, F16 = np.float32, np.float16

# Every entry: arch, seed, a one-line shape description, and the geometry. Common keys: E n_embd,
# L layers, H heads, Hkv kv heads, hd head_dim (written as attention.key_length/value_length when
# set), F n_ff, V vocab, tied (no output.weight), dt (matrix dtype: F32, F16 or a quant name),
# embd (token embedding std), base (rope.freq_base); optional gain (matrix gain, LAYER_GAIN by
# default), out_norm / post_norm (centre of output_norm / gemma2's post norms: they scale the
# logits or the sub-layer outputs so that the greedy path neither collapses nor ties).
SHAPES = {
    # --- llama (rope NORM) ---
    "llama_a": dict(arch="llama", seed=4101, E=64, L=4, H=4, Hkv=1, hd=32, F=160, V=256, tied=True, dt=F32,
                    embd=0.5, base=10000.0, llama3_rope=True,
                    shape="llama3 rope (rope_freqs.weight: factor 8, low 1, high 4, orig 8192, base 1e4), "
                          "n_embd 64, 4 layers, 4 heads / 1 kv head of 32 (4*32 != 64), n_ff 160, vocab 256, "
                          "f32, tied"),
    "llama_b": dict(arch="llama", seed=4102, E=96, L=5, H=6, Hkv=3, hd=None, F=256, V=300, tied=False, dt=F16,
                    embd=1.0, base=10000.0,
                    shape="Mistral/TinyLlama style, n_embd 96, 5 layers, 6 heads / 3 kv heads of 16, n_ff 256, "
                          "vocab 300, f16, untied"),
    "llama_c": dict(arch="llama", seed=4103, E=160, L=3, H=5, Hkv=5, hd=None, F=224, V=320, tied=False, dt=F32,
                    embd=1.0, base=500000.0, attn_bias=True,
                    shape="attention biases (attn_q/k/v.bias, attn_output.bias), n_embd 160, 3 layers, 5 heads / "
                          "5 kv heads of 32 (MHA), n_ff 224, vocab 320, rope base 5e5, f32, untied"),
    # --- qwen3 (QK-norm, rope NEOX) ---
    "qwen3_a": dict(arch="qwen3", seed=4201, E=64, L=4, H=4, Hkv=2, hd=32, F=128, V=256, tied=True, dt=F32,
                    embd=0.5, base=1000000.0,
                    shape="n_embd 64, 4 layers, 4 heads / 2 kv heads of 32 (key_length; 4*32 != 64), n_ff 128, "
                          "vocab 256, rope base 1e6, f32, tied"),
    "qwen3_b": dict(arch="qwen3", seed=4202, E=160, L=3, H=8, Hkv=2, hd=24, F=320, V=300, tied=False, dt=F16,
                    embd=1.0, base=10000.0,
                    shape="n_embd 160, 3 layers, 8 heads / 2 kv heads of 24 (8*24 != 160), n_ff 320, vocab 300, "
                          "f16, untied"),
    # --- qwen3moe ---
    "qwen3moe_a": dict(arch="qwen3moe", seed=4301, E=64, L=3, H=4, Hkv=2, hd=32, F=192, V=256, tied=True, dt=F32,
                       embd=0.5, base=1000000.0, n_expert=8, n_used=2, F_exp=48,
                       shape="8 experts top-2 (expert_feed_forward_length 48), n_embd 64, 3 layers, 4 heads / "
                             "2 kv heads of 32, vocab 256, f32, tied"),
    "qwen3moe_b": dict(arch="qwen3moe", seed=4302, E=96, L=2, H=4, Hkv=4, hd=40, F=128, V=300, tied=False, dt=F16,
                       embd=1.0, base=10000.0, n_expert=4, n_used=3, F_exp=64,
                       shape="4 experts top-3 (expert_feed_forward_length 64), n_embd 96, 2 layers, 4 heads / "
                             "4 kv heads of 40 (4*40 != 96), vocab 300, f16, untied"),
    # --- phi3 (fused attn_qkv and gate|up, rope NEOX) ---
    "phi3_a": dict(arch="phi3", seed=4401, E=96, L=3, H=4, Hkv=4, hd=None, F=192, V=256, tied=False, dt=F32,
                   embd=1.0, base=10000.0, sliding_window=16,
                   shape="Phi-3-mini style: fused attn_qkv and ffn_up (gate|up), n_embd 96, 3 layers, 4 heads / "
                         "4 kv heads of 24, n_ff 192, vocab 256, attention.sliding_window 16 (which llama.cpp "
                         "ignores), f32, untied"),
    "phi3_b": dict(arch="phi3", seed=4402, E=128, L=3, H=8, Hkv=2, hd=None, F=160, V=300, tied=True, dt=F16,
                   embd=0.5, base=10000.0, n_rot=12, longrope=True, ctx=131072,
                   shape="Phi-4-mini style: fused attn_qkv (GQA 4), partial rope (12 of 16 dims), "
                         "rope_factors_short/long (context 131072, original 4096: the short factors apply at "
                         "n_ctx 256) and rope.scaling.attn_factor, n_embd 128, 3 layers, 8 heads / 2 kv heads "
                         "of 16, n_ff 160, vocab 300, f16, tied"),
    # --- gemma2 ---
    "gemma2_a": dict(arch="gemma2", seed=4501, E=64, L=4, H=4, Hkv=2, hd=32, F=128, V=256, tied=True, dt=F32,
                     embd=0.06, base=10000.0, swa=8, attn_cap=50.0, final_cap=30.0, out_norm=8.0,
                     shape="sliding window 8 on layers 0 and 2 (default pattern 2), attn softcap 50, final "
                           "softcap 30, n_embd 64, 4 layers, 4 heads / 2 kv heads of 32 (4*32 != 64), n_ff 128, "
                           "vocab 256, f32"),
    "gemma2_b": dict(arch="gemma2", seed=4502, E=96, L=5, H=2, Hkv=1, hd=64, F=192, V=300, tied=True, dt=F16,
                     embd=0.1, base=10000.0, swa=12, attn_cap=8.0, final_cap=10.0, post_norm=3.0, out_norm=3.0,
                     shape="sliding window 12 on layers 0, 2, 4, attn softcap 8, final softcap 10 (both active), "
                           "n_embd 96, 5 layers, 2 heads / 1 kv head of 64 (2*64 != 96), n_ff 192, vocab 300, f16"),
    "gemma2_c": dict(arch="gemma2", seed=4503, E=64, L=3, H=2, Hkv=2, hd=32, F=100, V=256, tied=True, dt=F32,
                     embd=0.06, base=10000.0, swa=6, attn_cap=20.0, final_cap=30.0, out_norm=8.0,
                     shape="n_ff 100 (not a multiple of 8: the GELU kernels' vector/scalar split), sliding window "
                           "6 on layers 0 and 2, attn softcap 20, final 30, n_embd 64, 3 layers, 2 heads / 2 kv heads "
                           "of 32, vocab 256, f32"),
    # --- smollm3 (NoPE every 4th layer, rope NORM) ---
    "smollm3_a": dict(arch="smollm3", seed=4601, E=64, L=4, H=4, Hkv=1, hd=None, F=128, V=256, tied=True, dt=F32,
                      embd=0.5, base=5000000.0,
                      shape="layer 3 without rope, n_embd 64, 4 layers, 4 heads / 1 kv head of 16, n_ff 128, "
                            "vocab 256, rope base 5e6, f32, tied"),
    "smollm3_b": dict(arch="smollm3", seed=4602, E=96, L=8, H=6, Hkv=3, hd=None, F=160, V=300, tied=False, dt=F16,
                      embd=1.0, base=10000.0,
                      shape="layers 3 and 7 without rope, n_embd 96, 8 layers, 6 heads / 3 kv heads of 16, "
                            "n_ff 160, vocab 300, f16, untied"),
    "llama_d": dict(arch="llama", seed=4104, E=64, L=3, H=4, Hkv=2, hd=None, F=96, V=256, tied=False, dt=F32,
                    embd=1.0, base=10000.0, n_expert=4, n_used=2, rope_linear=2.0,
                    shape="Mixtral style: 4 experts top-2 each of the dense width (no expert_feed_forward_length), "
                          "linear rope scaling factor 2 (rope.scaling.type linear), n_embd 64, 3 layers, 4 heads / "
                          "2 kv heads of 16, n_ff 96, vocab 256, f32, untied"),
    # --- ernie4_5 (the llama block, rope NORM; added as one file: src/model/arch/ernie4_5.cpp) ---
    "ernie4_5_a": dict(arch="ernie4_5", seed=4801, E=64, L=3, H=4, Hkv=2, hd=None, F=160, V=256, tied=True, dt=F32,
                       embd=0.5, base=500000.0,
                       shape="n_embd 64, 3 layers, 4 heads / 2 kv heads of 16, n_ff 160, vocab 256, rope base 5e5, "
                             "f32, tied"),
    "ernie4_5_b": dict(arch="ernie4_5", seed=4802, E=96, L=4, H=3, Hkv=3, hd=None, F=224, V=300, tied=False, dt=F16,
                       embd=1.0, base=10000.0,
                       shape="n_embd 96, 4 layers, 3 heads / 3 kv heads of 32, n_ff 224, vocab 300, f16, untied"),
    # --- gemma4 ---
    "gemma4_a": dict(arch="gemma4", seed=4701, E=96, L=6, H=4, Hkv=None, hd=None, F=192, V=256, tied=True, dt=F32,
                     embd=0.06, base=1000000.0, base_swa=10000.0, swa=8, out_norm=6.0,
                     swa_layers=[True, True, False, True, True, False], hkv_swa=2, hkv_full=1,
                     hd_swa=32, hd_full=64, rot_full_frac=0.25, k_eq_v=True, out_scale=True, n_shared=0,
                     n_per_layer=0, final_cap=30.0,
                     shape="31B style: sliding window 8 (pattern array [s s f s s f]), head_dim 32 sliding / 64 "
                           "full, 2 / 1 kv heads, proportional rope on full layers (rope_freqs: 8 of 32 pairs, "
                           "freq base 1e6) and full rope on sliding layers (base 1e4), full layers with K = V "
                           "(no attn_v), layer_output_scale, n_embd 96, 6 layers, 4 heads, n_ff 192, vocab 256, "
                           "f32, tied"),
    "gemma4_b": dict(arch="gemma4", seed=4702, E=64, L=5, H=2, Hkv=None, hd=None, F=[128, 128, 128, 256, 256], V=300,
                     tied=False, dt=F16, embd=0.1, base=1000000.0, base_swa=10000.0, swa=6,
                     swa_layers=[True, True, False, True, False], hkv_swa=1, hkv_full=1,
                     hd_swa=32, hd_full=64, rot_full_frac=0.25, k_eq_v=False, out_scale=False, n_shared=2,
                     n_per_layer=16, final_cap=30.0,
                     shape="E2B style: per-layer embeddings (16 per layer), the last 2 layers share KV (layer 3 "
                           "reads layer 1's, layer 4 layer 2's), double-wide MLP on shared layers (n_ff 128/256 "
                           "array), sliding window 6 (pattern [s s f s f]), head_dim 32 / 64, n_embd 64, 5 "
                           "layers, 2 heads / 1 kv head, vocab 300, f16, untied"),
    # --- the llama architecture quantized (K-quant and IQ4 blocks of 256 / 32) ---
    **{f"quant_{q.lower()}": dict(arch="llama", seed=4800 + i, E=256, L=2, H=4, Hkv=2, hd=None, F=512, V=256,
                                  tied=q in ("Q2_K", "IQ4_XS"), dt=q, base=10000.0,
                                  embd=0.3 if q in ("Q2_K", "IQ4_XS") else 1.0,
                                  shape=f"llama, every 2-D matrix (token_embd too) {q}, n_embd 256, 2 layers, "
                                        f"4 heads / 2 kv heads of 64, n_ff 512, vocab 256, "
                                        f"{'tied' if q in ('Q2_K', 'IQ4_XS') else 'untied'}")
       for i, q in enumerate(["Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS"])},
}
# Matrices are N(0, (gain / sqrt(fan_in))^2) with this gain: at 1 most of these random models fall
# into repeating one token within a few steps; at 2 the greedy continuations wander.
LAYER_GAIN = 2.0
PROMPT_LENGTHS = [7, 19, 33, 48, 12, 26, 40, 55]  # 8 prompts: >= 4 must match in full
N_GEN = 24
N_CTX = 256
# Relative RMS error (|deq - w| / |w|) allowed for the encoders on N(0, 1) weights; measured
# 0.33 (Q2_K), 0.156 (Q3_K), 0.080 (IQ4_NL), 0.080 (IQ4_XS).
QUANT_MAX_ERR = {"Q2_K": 0.40, "Q3_K": 0.20, "IQ4_NL": 0.10, "IQ4_XS": 0.10}


# ---------------------------------------------------------------------------------------------
# Quantizers (round to nearest). Byte layouts as gguf/quants.py dequantize_blocks reads them.
# ---------------------------------------------------------------------------------------------
QK_K = 256
IQ4_KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)


def _f16_bytes(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).reshape(-1, 1).view(np.uint8)


def _pack_2bit_k(q: np.ndarray) -> np.ndarray:
    """(n, 256) values 0..3 -> (n, 64) bytes: element h*128 + j*32 + l sits in byte h*32 + l, bits 2j."""
    q = q.reshape(-1, 2, 4, 32).astype(np.uint8)
    out = q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)
    return out.reshape(-1, 64)


def _signed_absmax(x: np.ndarray) -> np.ndarray:
    """The element of largest magnitude along the last axis, with its sign."""
    i = np.argmax(np.abs(x), axis=-1)
    return np.take_along_axis(x, i[..., None], axis=-1)[..., 0]


def encode_q2_k(x: np.ndarray) -> np.ndarray:
    """block_q2_K (84 bytes / 256): scales[16] (low nibble scale, high nibble min), qs[64], d, dmin;
    y = d * sc * q - dmin * m, q in 0..3 per 16-element sub-block."""
    b = x.reshape(-1, 16, 16).astype(np.float32)
    mn = np.minimum(b.min(-1), 0.0)
    scale = (b.max(-1) - mn) / 3.0
    d = (scale.max(-1) / 15.0).astype(np.float16).astype(np.float32)
    dmin = ((-mn).max(-1) / 15.0).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d[:, None] > 0, np.clip(np.round(scale / d[:, None]), 0, 15), 0)
        m = np.where(dmin[:, None] > 0, np.clip(np.round(-mn / dmin[:, None]), 0, 15), 0)
        step = d[:, None] * sc
        q = np.where(step[..., None] > 0,
                     np.clip(np.round((b + (dmin[:, None] * m)[..., None]) / step[..., None]), 0, 3), 0)
    scales = (sc.astype(np.uint8) | (m.astype(np.uint8) << 4))
    return np.concatenate([scales, _pack_2bit_k(q.reshape(-1, 256)), _f16_bytes(d), _f16_bytes(dmin)], axis=1)


def encode_q3_k(x: np.ndarray) -> np.ndarray:
    """block_q3_K (110 bytes / 256): hmask[32], qs[64], scales[12] (16 six-bit values, +32 bias), d;
    y = d * (sc - 32) * q, q in -4..3 (low 2 bits in qs, bit 2 inverted in hmask)."""
    b = x.reshape(-1, 16, 16).astype(np.float32)
    s = -_signed_absmax(b) / 4.0  # the largest-magnitude element becomes q = -4
    d = (np.abs(s).max(-1) / 31.0).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d[:, None] > 0, np.clip(np.round(s / d[:, None]), -32, 31), 0)
        step = d[:, None] * sc
        q = np.where(step[..., None] != 0, np.clip(np.round(b / step[..., None]), -4, 3), 0).astype(np.int8)
    q = q.reshape(-1, 256)
    hbit = (q >= 0).astype(np.uint8).reshape(-1, 8, 32)  # element b*32 + l: byte l, bit b
    hmask = np.zeros((q.shape[0], 32), dtype=np.uint8)
    for bit in range(8):
        hmask |= hbit[:, bit] << bit
    qs = _pack_2bit_k((q & 3).astype(np.uint8))
    u = (sc + 32).astype(np.uint8)  # (n, 16), 0..63
    low = (u[:, :8] & 15) | ((u[:, 8:] & 15) << 4)
    hi = (u >> 4) & 3  # scale k*4 + j -> byte 8 + j, bits 2k
    high = hi[:, 0:4] | (hi[:, 4:8] << 2) | (hi[:, 8:12] << 4) | (hi[:, 12:16] << 6)
    return np.concatenate([hmask, qs, low, high, _f16_bytes(d)], axis=1)


def _nearest_kvalue(r: np.ndarray) -> np.ndarray:
    return np.argmin(np.abs(r[..., None] - IQ4_KVALUES), axis=-1).astype(np.uint8)


def _pack_nibbles_32(idx: np.ndarray) -> np.ndarray:
    """(..., 32) -> (..., 16): byte l holds element l (low nibble) and element l + 16 (high)."""
    return idx[..., :16] | (idx[..., 16:] << 4)


def encode_iq4_nl(x: np.ndarray) -> np.ndarray:
    """block_iq4_nl (18 bytes / 32): d, qs[16]; y = d * kvalues[q]."""
    b = x.reshape(-1, 32).astype(np.float32)
    d = (_signed_absmax(b) / IQ4_KVALUES[0]).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(d[:, None] != 0, b / d[:, None], 0.0)
    return np.concatenate([_f16_bytes(d), _pack_nibbles_32(_nearest_kvalue(r))], axis=1)


def encode_iq4_xs(x: np.ndarray) -> np.ndarray:
    """block_iq4_xs (136 bytes / 256): d, scales_h (u16, 2 bits per sub-block), scales_l[4] (nibbles),
    qs[128]; y = d * (ls - 32) * kvalues[q] per 32-element sub-block."""
    b = x.reshape(-1, 8, 32).astype(np.float32)
    s = _signed_absmax(b) / IQ4_KVALUES[0]
    d = (np.abs(s).max(-1) / 31.0).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.where(d[:, None] > 0, np.clip(np.round(s / d[:, None]), -32, 31), 0)
        step = d[:, None] * ls
        r = np.where(step[..., None] != 0, b / step[..., None], 0.0)
    u = (ls + 32).astype(np.uint16)  # (n, 8)
    scales_h = np.zeros(u.shape[0], dtype=np.uint16)
    for i in range(8):
        scales_h |= ((u[:, i] >> 4) & 3) << (2 * i)
    ul = (u & 15).astype(np.uint8)
    scales_l = ul[:, 0::2] | (ul[:, 1::2] << 4)
    qs = _pack_nibbles_32(_nearest_kvalue(r)).reshape(-1, 128)
    return np.concatenate([_f16_bytes(d), scales_h.reshape(-1, 1).view(np.uint8), scales_l, qs], axis=1)


ENCODERS = {"Q2_K": encode_q2_k, "Q3_K": encode_q3_k, "IQ4_NL": encode_iq4_nl, "IQ4_XS": encode_iq4_xs}


def quantize(w: np.ndarray, qname: str) -> tuple[np.ndarray, float]:
    """[rows, cols] f32 -> ([rows, bytes per row] uint8, relative RMS error of gguf's dequantization)."""
    import gguf

    qtype = gguf.GGMLQuantizationType[qname]
    raw = ENCODERS[qname](w.reshape(-1))
    raw = raw.reshape(w.shape[0], -1)
    assert raw.shape[1] == w.shape[1] // gguf.GGML_QUANT_SIZES[qtype][0] * gguf.GGML_QUANT_SIZES[qtype][1]
    back = gguf.quants.dequantize(raw, qtype).reshape(w.shape)
    err = float(np.sqrt(np.mean((back - w) ** 2) / np.mean(w.astype(np.float64) ** 2)))
    assert err < QUANT_MAX_ERR[qname], f"{qname} encoder: relative RMS error {err:.3f}"
    return raw, err


# ---------------------------------------------------------------------------------------------
# Model writers
# ---------------------------------------------------------------------------------------------
def llama3_rope_factors(base: float, dim: int, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                        old_context_len=8192) -> np.ndarray:
    """rope_freqs.weight as convert_hf_to_gguf.py (conversion/llama.py, LlamaModel.generate_extra_tensors)
    computes it for rope_type 'llama3' (float32 arithmetic like its torch code)."""
    freqs = (1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))).astype(F32)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    out = []
    for freq in freqs:
        wavelen = np.float32(2 * math.pi) / freq
        if wavelen < high_freq_wavelen:
            out.append(np.float32(1))
        elif wavelen > low_freq_wavelen:
            out.append(np.float32(factor))
        else:
            smooth = (np.float32(old_context_len) / wavelen - np.float32(low_freq_factor)) / np.float32(
                high_freq_factor - low_freq_factor)
            out.append(np.float32(1) / ((np.float32(1) - smooth) / np.float32(factor) + smooth))
    return np.array(out, dtype=F32)


class Builder:
    def __init__(self, name: str, path: str):
        import gguf

        self.gguf = gguf
        self.s = SHAPES[name]
        self.rng = np.random.default_rng(self.s["seed"])
        self.arch = self.s["arch"]
        self.w = gguf.GGUFWriter(path, self.arch)
        # Not the arch's name: llama.cpp's vocab loader special-cases names containing "phi3".
        self.w.add_string("general.name", f"specula fixture {self.s['seed']} (random weights)")
        self.quant_errors: list[float] = []

    def u32(self, key, val):
        self.w.add_uint32(f"{self.arch}.{key}", int(val))

    def f32(self, key, val):
        self.w.add_float32(f"{self.arch}.{key}", float(val))

    def arr(self, key, val):
        self.w.add_array(f"{self.arch}.{key}", val)

    def vocab(self):
        V = self.s["V"]
        # A gpt2-style vocabulary (the ids are fed directly; the text is never tokenized).
        self.w.add_string("tokenizer.ggml.model", "gpt2")
        self.w.add_string("tokenizer.ggml.pre", "qwen2")
        self.w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(V)])
        self.w.add_array("tokenizer.ggml.token_type", [1] * V)
        self.w.add_array("tokenizer.ggml.merges", ["t o"])
        self.w.add_uint32("tokenizer.ggml.bos_token_id", 0)
        self.w.add_uint32("tokenizer.ggml.eos_token_id", 1)

    def tensor(self, name, data):
        dt = self.s["dt"]
        if data.ndim == 2 and isinstance(dt, str):
            raw, err = quantize(data.astype(F32), dt)
            self.quant_errors.append(err)
            self.w.add_tensor(name, raw, raw_dtype=self.gguf.GGMLQuantizationType[dt])
        elif data.ndim >= 2:
            self.w.add_tensor(name, data.astype(F32 if isinstance(dt, str) else dt))
        else:
            self.w.add_tensor(name, data.astype(F32))

    def mat(self, rows, cols, gain=1.0):  # numpy [rows, cols] = GGUF ne [cols, rows]
        return self.rng.standard_normal((rows, cols)) * (gain * self.s.get("gain", LAYER_GAIN) / np.sqrt(cols))

    def norm(self, n, center=1.0):
        return center + 0.1 * self.rng.standard_normal(n)

    def embeddings(self, E, V):
        self.tensor("token_embd.weight", self.rng.standard_normal((V, E)) * self.s["embd"])

    def output(self, E, V, gain=2.0):  # an untied output gets twice the layer gain
        self.tensor("output_norm.weight", self.norm(E, self.s.get("out_norm", 1.0)))
        if not self.s["tied"]:
            self.tensor("output.weight", self.mat(V, E, gain))

    def finish(self):
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()


def common_kv(b: Builder, hd=None):
    s = b.s
    b.u32("context_length", s.get("ctx", 4096))
    b.u32("embedding_length", s["E"])
    b.u32("block_count", s["L"])
    b.u32("feed_forward_length", s["F"])
    b.u32("attention.head_count", s["H"])
    if s["Hkv"] is not None:
        b.u32("attention.head_count_kv", s["Hkv"])
    if hd is not None:
        b.u32("attention.key_length", hd)
        b.u32("attention.value_length", hd)
    b.f32("attention.layer_norm_rms_epsilon", 1e-6 if b.arch != "phi3" else 1e-5)
    b.f32("rope.freq_base", s["base"])


def write_llama_like(b: Builder):
    """llama, qwen3, qwen3moe, smollm3, ernie4_5: pre-norm blocks with separate q/k/v and a SwiGLU MLP."""
    s = b.s
    E, L, H, Hkv, F, V = s["E"], s["L"], s["H"], s["Hkv"], s["F"], s["V"]
    hd = s["hd"] or E // H
    common_kv(b, hd=s["hd"])
    if s["hd"] is not None:
        b.u32("rope.dimension_count", hd)
    moe = "n_expert" in s
    if moe:
        b.u32("expert_count", s["n_expert"])
        b.u32("expert_used_count", s["n_used"])
        if b.arch == "qwen3moe":  # Mixtral-style llama MoE: each expert has the dense width
            b.u32("expert_feed_forward_length", s["F_exp"])
    if s.get("rope_linear"):
        b.w.add_string(f"{b.arch}.rope.scaling.type", "linear")
        b.f32("rope.scaling.factor", s["rope_linear"])
    b.vocab()
    b.embeddings(E, V)
    b.output(E, V)
    if s.get("llama3_rope"):
        b.tensor("rope_freqs.weight", llama3_rope_factors(s["base"], hd))
    for il in range(L):
        p = f"blk.{il}."
        b.tensor(p + "attn_norm.weight", b.norm(E))
        b.tensor(p + "attn_q.weight", b.mat(H * hd, E))
        b.tensor(p + "attn_k.weight", b.mat(Hkv * hd, E))
        b.tensor(p + "attn_v.weight", b.mat(Hkv * hd, E))
        b.tensor(p + "attn_output.weight", b.mat(E, H * hd))
        if s.get("attn_bias"):
            b.tensor(p + "attn_q.bias", 0.3 * b.rng.standard_normal(H * hd))
            b.tensor(p + "attn_k.bias", 0.3 * b.rng.standard_normal(Hkv * hd))
            b.tensor(p + "attn_v.bias", 0.3 * b.rng.standard_normal(Hkv * hd))
            b.tensor(p + "attn_output.bias", 0.1 * b.rng.standard_normal(E))
        if b.arch in ("qwen3", "qwen3moe"):
            b.tensor(p + "attn_q_norm.weight", b.norm(hd))
            b.tensor(p + "attn_k_norm.weight", b.norm(hd))
        b.tensor(p + "ffn_norm.weight", b.norm(E))
        if moe:
            X, Fe = s["n_expert"], s.get("F_exp", F)
            b.tensor(p + "ffn_gate_inp.weight", b.mat(X, E, 2.0))
            b.tensor(p + "ffn_gate_exps.weight", np.stack([b.mat(Fe, E) for _ in range(X)]))
            b.tensor(p + "ffn_up_exps.weight", np.stack([b.mat(Fe, E) for _ in range(X)]))
            b.tensor(p + "ffn_down_exps.weight", np.stack([b.mat(E, Fe) for _ in range(X)]))
        else:
            b.tensor(p + "ffn_gate.weight", b.mat(F, E))
            b.tensor(p + "ffn_up.weight", b.mat(F, E))
            b.tensor(p + "ffn_down.weight", b.mat(E, F))


def write_phi3(b: Builder):
    s = b.s
    E, L, H, Hkv, F, V = s["E"], s["L"], s["H"], s["Hkv"], s["F"], s["V"]
    hd = E // H  # phi3's attn_output is {n_embd, n_embd}: the query width must be n_embd
    n_rot = s.get("n_rot", hd)
    common_kv(b)
    b.u32("rope.dimension_count", n_rot)
    if s.get("sliding_window") is not None:
        b.u32("attention.sliding_window", s["sliding_window"])
    if s.get("longrope"):
        orig = 4096
        b.u32("rope.scaling.original_context_length", orig)
        scale = s["ctx"] / orig
        b.f32("rope.scaling.attn_factor", math.sqrt(1 + math.log(scale) / math.log(orig)))
    b.vocab()
    b.embeddings(E, V)
    b.output(E, V)
    if s.get("longrope"):
        b.tensor("rope_factors_long.weight", 1.0 + np.abs(b.rng.standard_normal(n_rot // 2)) * 8.0)
        b.tensor("rope_factors_short.weight", 1.0 + np.abs(b.rng.standard_normal(n_rot // 2)) * 2.0)
    for il in range(L):
        p = f"blk.{il}."
        b.tensor(p + "attn_norm.weight", b.norm(E))
        b.tensor(p + "attn_qkv.weight", b.mat(E + 2 * Hkv * hd, E))  # rows: q | k | v
        b.tensor(p + "attn_output.weight", b.mat(E, E))
        b.tensor(p + "ffn_norm.weight", b.norm(E))
        b.tensor(p + "ffn_up.weight", b.mat(2 * F, E))  # rows: gate | up
        b.tensor(p + "ffn_down.weight", b.mat(E, F))


def write_gemma2(b: Builder):
    s = b.s
    E, L, H, Hkv, F, V, hd = s["E"], s["L"], s["H"], s["Hkv"], s["F"], s["V"], s["hd"]
    common_kv(b, hd=hd)
    b.u32("attention.sliding_window", s["swa"])
    b.f32("attn_logit_softcapping", s["attn_cap"])
    b.f32("final_logit_softcapping", s["final_cap"])
    b.vocab()
    b.embeddings(E, V)
    b.tensor("output_norm.weight", b.norm(E, s.get("out_norm", 1.0)))  # gemma2 always ties output to token_embd
    for il in range(L):
        p = f"blk.{il}."
        b.tensor(p + "attn_norm.weight", b.norm(E))
        b.tensor(p + "attn_q.weight", b.mat(H * hd, E, 2.0))
        b.tensor(p + "attn_k.weight", b.mat(Hkv * hd, E, 2.0))
        b.tensor(p + "attn_v.weight", b.mat(Hkv * hd, E))
        b.tensor(p + "attn_output.weight", b.mat(E, H * hd))
        b.tensor(p + "post_attention_norm.weight", b.norm(E, s.get("post_norm", 1.0)))
        b.tensor(p + "ffn_norm.weight", b.norm(E))
        b.tensor(p + "ffn_gate.weight", b.mat(F, E))
        b.tensor(p + "ffn_up.weight", b.mat(F, E))
        b.tensor(p + "ffn_down.weight", b.mat(E, F))
        b.tensor(p + "post_ffw_norm.weight", b.norm(E, s.get("post_norm", 1.0)))


def write_gemma4(b: Builder):
    s = b.s
    E, L, H, V = s["E"], s["L"], s["H"], s["V"]
    swa = s["swa_layers"]
    n_ff = s["F"] if isinstance(s["F"], list) else [s["F"]] * L
    hkv = [s["hkv_swa"] if x else s["hkv_full"] for x in swa]
    hd = [s["hd_swa"] if x else s["hd_full"] for x in swa]
    kv_from = L - s["n_shared"]
    P = s["n_per_layer"]
    if s["n_shared"]:
        assert swa[kv_from - 2] and not swa[kv_from - 1], "llama.cpp reuses layers kv_from-2 (swa) / -1 (full)"
    b.u32("context_length", 4096)
    b.u32("embedding_length", E)
    b.u32("block_count", L)
    if len(set(n_ff)) == 1:
        b.u32("feed_forward_length", n_ff[0])
    else:
        b.arr("feed_forward_length", [int(x) for x in n_ff])
    b.u32("attention.head_count", H)
    if s["hkv_swa"] == s["hkv_full"]:
        b.u32("attention.head_count_kv", s["hkv_swa"])
    else:
        b.arr("attention.head_count_kv", [int(x) for x in hkv])
    b.u32("attention.key_length", s["hd_full"])
    b.u32("attention.value_length", s["hd_full"])
    b.u32("attention.key_length_swa", s["hd_swa"])
    b.u32("attention.value_length_swa", s["hd_swa"])
    b.u32("rope.dimension_count", s["hd_full"])
    b.u32("rope.dimension_count_swa", s["hd_swa"])
    b.f32("rope.freq_base", s["base"])
    b.f32("rope.freq_base_swa", s["base_swa"])
    b.u32("attention.sliding_window", s["swa"])
    b.arr("attention.sliding_window_pattern", [bool(x) for x in swa])
    b.u32("attention.shared_kv_layers", s["n_shared"])
    b.u32("embedding_length_per_layer_input", P)
    b.f32("attention.layer_norm_rms_epsilon", 1e-6)
    b.f32("final_logit_softcapping", s["final_cap"])
    b.vocab()
    b.embeddings(E, V)
    b.output(E, V)
    if P:
        b.tensor("per_layer_token_embd.weight", b.rng.standard_normal((V, P * L)) * 0.1)
        b.tensor("per_layer_model_proj.weight", b.mat(P * L, E))
        b.tensor("per_layer_proj_norm.weight", b.norm(P))
    n_rot_pairs = int(s["hd_full"] * s["rot_full_frac"] / 2)
    b.tensor("rope_freqs.weight", np.array([1.0] * n_rot_pairs + [1e30] * (s["hd_full"] // 2 - n_rot_pairs)))
    for il in range(L):
        p = f"blk.{il}."
        d = hd[il]
        has_kv = il < kv_from
        b.tensor(p + "attn_norm.weight", b.norm(E))
        b.tensor(p + "attn_q.weight", b.mat(H * d, E))
        if has_kv:
            b.tensor(p + "attn_k.weight", b.mat(hkv[il] * d, E))
            if not (s["k_eq_v"] and not swa[il]):
                b.tensor(p + "attn_v.weight", b.mat(hkv[il] * d, E))
            b.tensor(p + "attn_k_norm.weight", b.norm(d))
        b.tensor(p + "attn_q_norm.weight", b.norm(d))
        b.tensor(p + "attn_output.weight", b.mat(E, H * d))
        b.tensor(p + "post_attention_norm.weight", b.norm(E))
        if s["out_scale"]:
            b.tensor(p + "layer_output_scale.weight", np.array([0.6 + 0.1 * il]))
        b.tensor(p + "ffn_norm.weight", b.norm(E))
        b.tensor(p + "ffn_gate.weight", b.mat(n_ff[il], E))
        b.tensor(p + "ffn_up.weight", b.mat(n_ff[il], E))
        b.tensor(p + "ffn_down.weight", b.mat(E, n_ff[il]))
        b.tensor(p + "post_ffw_norm.weight", b.norm(E))
        if P:
            b.tensor(p + "inp_gate.weight", b.mat(P, E, 2.0))
            b.tensor(p + "proj.weight", b.mat(E, P))
            b.tensor(p + "post_norm.weight", b.norm(E))


WRITERS = {"llama": write_llama_like, "qwen3": write_llama_like, "qwen3moe": write_llama_like,
           "smollm3": write_llama_like, "ernie4_5": write_llama_like, "phi3": write_phi3, "gemma2": write_gemma2, "gemma4": write_gemma4}


def write_model(name: str, path: str) -> list[float]:
    """Writes the model; returns the encoders' relative RMS errors (quantized models only)."""
    b = Builder(name, path)
    WRITERS[b.arch](b)
    b.finish()
    return b.quant_errors


def prompts(name: str) -> list[list[int]]:
    rng = np.random.default_rng(SHAPES[name]["seed"] + 1000)
    V = SHAPES[name]["V"]
    return [[int(x) for x in rng.integers(2, V, n)] for n in PROMPT_LENGTHS]


def oracle(name: str, path: str) -> dict:
    from llama_cpp import Llama

    no_extra_buffers()
    llm = Llama(model_path=path, n_ctx=N_CTX, logits_all=True, n_threads=2, n_batch=N_CTX, verbose=False)
    V = SHAPES[name]["V"]
    probe = [int(x) for x in np.random.default_rng(7).choice(V, 16, replace=False)]
    cases = greedy_and_teacher_forced(llm, prompts(name), N_GEN, probe)
    del llm
    return {"arch": SHAPES[name]["arch"], "shape": SHAPES[name]["shape"], "sha256": sha256(path),
            "probe_ids": probe, "cases": cases}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-only", action="store_true", help="write the GGUF files only")
    ap.add_argument("--out", help="folder for the GGUF files (default: a temporary folder)")
    ap.add_argument("--check", action="store_true", help="with --models-only: compare with the fixture's sha256")
    ap.add_argument("--only", help="comma-separated model names (default: all)")
    args = ap.parse_args()
    names = list(SHAPES)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in SHAPES]
        if unknown:
            print(f"error: unknown model(s) {unknown}; known: {', '.join(SHAPES)}", file=sys.stderr)
            return 2
    out = args.out or tempfile.mkdtemp(prefix="specula_arch_")
    os.makedirs(out, exist_ok=True)
    paths, errors = {}, {}
    for name in names:
        paths[name] = os.path.join(out, f"arch_{name}.gguf")
        errors[name] = write_atomic(paths[name], lambda tmp, n=name: write_model(n, tmp))
    if args.models_only:
        return check_models(paths, FIXTURE, args.check)
    import llama_cpp

    for name, errs in errors.items():
        if errs:
            print(f"{name}: encoder relative RMS error max {max(errs):.4f} mean {np.mean(errs):.4f}")
    models = {}
    if args.only and os.path.exists(FIXTURE):
        with open(FIXTURE) as f:
            models = json.load(f)["models"]
    for name, p in paths.items():
        models[name] = oracle(name, p)
        distinct = [len(set(c["greedy"])) for c in models[name]["cases"]]
        print(f"{name}: distinct tokens in the greedy continuations {distinct}")
        if min(distinct) < 3:
            print(f"error: {name}'s greedy continuation is degenerate; tune its gains", file=sys.stderr)
            return 1
    ref = {"format": "arch_reference v1: per model its arch, a shape line, the GGUF's sha256 "
                     "(tools/make_arch_fixtures.py regenerates it as arch_<name>.gguf), probe_ids, and per "
                     f"prompt: prompt ids, llama.cpp's greedy continuation ({N_GEN} tokens), and at every "
                     "position of prompt + continuation the argmax, top 8 ids and logits, and the logits of "
                     "probe_ids (teacher forced).",
           "oracle": f"llama-cpp-python {llama_cpp.__version__} (CPU, f16 KV cache, no flash attention, "
                     f"n_ctx {N_CTX}, no extra buffer types: no weight repacking or AMX)",
           "models": {n: models[n] for n in SHAPES if n in models}}
    with open(FIXTURE, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {FIXTURE} ({os.path.getsize(FIXTURE)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
