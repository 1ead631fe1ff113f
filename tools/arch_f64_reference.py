#!/usr/bin/env python3
"""Float64 oracle for the tiny random-weight architecture fixtures (tools/make_arch_fixtures.py,
tests/fixtures/arch_reference.json): an independent numpy forward pass for the llama.cpp
architectures llama, qwen3, qwen3moe, phi3, gemma2, smollm3 and gemma4 (dense; and the quant_* models,
which are llama with Q2_K / Q3_K / IQ4_NL / IQ4_XS matrices), following docs/ARCH_FACTS.md.

Every tensor is dequantized with the `gguf` package's reference dequantizers and used in float64;
no KV cache, no f16 / Q8 activation rounding, RoPE angles in float64, exact GELU-tanh and SiLU.
Each fixture case's prompt + greedy continuation is teacher forced, giving the logits at every
position, which are compared with llama.cpp's (the fixture's top-8 logits and probe logits).

usage: python3 tools/arch_f64_reference.py [--only a,b] [--save DIR] [--compare-bin PATTERN]
                                           [--models DIR] [--verbose]
  --only a,b            models to run (default: every model in the fixture)
  --save DIR            writes DIR/<name>_case<i>.npy, float64 logits [n_positions, n_vocab]
  --compare-bin PATTERN another engine's float32 logits [n_positions, n_vocab] row-major, one file
                        per case; <name> / {name} and <i> / {i} in PATTERN are replaced by the model
                        name and the case index (e.g. '/tmp/spec_<name>_<i>.bin'); missing files are
                        reported and skipped. Reports that engine's max |logit - f64| and its top-1
                        agreement with f64.
  --models DIR          where arch_<name>.gguf lives (default /tmp/specula_arch_models; files that
                        are missing are written there with tools/make_arch_fixtures.py --models-only)
  --verbose             per-case lines
Per model it prints llama.cpp's max |logit - f64| over the recorded top-8 logits and over the probe
logits, and how often llama.cpp's argmax equals f64's (with the smallest f64 top-2 gap among the
disagreements: a disagreement on a near tie is not a bug). Not run by the tests.

What to expect (llama.cpp vs f64, 4 cases x ~50 positions per model): about 0.02..0.24 max |d| and
99-100% top-1 for the f32/f16 models; the quant_* models differ more (0.5..1.6, top-1 91-97%)
because llama.cpp quantizes the activations to Q8_K / Q8_0 before every quantized matmul and these
random models amplify that noise: llama.cpp run on an f32 copy of the same dequantized weights
stays within 0.03..0.06 of this f64 pass (top-1 202-203/203), so the gap is the activation
quantization, not the architecture or the dequantization (gguf's dequantizers equal ggml's
to_float bit for bit on these tensors).
gemma4 (8 cases per model): gemma4_b 0.16 max |d|, top-1 428/432; gemma4_a 0.92 max |d|, top-1
424/432 (98.1%): its attention has scale 1.0 on RMS-normed Q/K (large scores), so llama.cpp's f16
rounding of Q, K, V and the probabilities (plus its f16 GELU table) is amplified; rounding those
the same way in this pass brings gemma4_a to 0.15 max |d|, top-1 430/432.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "fixtures", "arch_reference.json")
N_CTX = 256  # the fixture's llama.cpp context size (decides phi3's short vs long rope factors)
SUPPORTED = {"llama", "qwen3", "qwen3moe", "phi3", "gemma2", "smollm3", "gemma4"}
NORM_ROPE = {"llama", "smollm3"}  # adjacent pairs; the others here are NEOX (half split)


class Model:
    def __init__(self, path):
        r = GGUFReader(path)
        self.kv = {}
        for k, f in r.fields.items():
            if k.startswith("tokenizer.") and k != "tokenizer.ggml.tokens":
                continue
            if k == "tokenizer.ggml.tokens":
                self.n_vocab = len(f.data)
                continue
            self.kv[k] = f.contents()
        self.arch = self.kv["general.architecture"]
        self.t = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.t[t.name] = a.reshape([int(x) for x in reversed(t.shape.tolist())])

    def key(self, name, default=None):
        return self.kv.get(f"{self.arch}.{name}", default)

    def per_layer(self, name, il, default=None):
        v = self.key(name, default)
        return v[il] if isinstance(v, list) else v

    def has(self, name):
        return name in self.t


def rms(x, w, eps):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y if w is None else y * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def rope(x, pos, n_rot, base, freq_scale, ff, mscale, neox):
    """x [T, H, hd]: rotates the first n_rot dims of each head, passes the rest through."""
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half) / n_rot)
    if ff is not None:
        inv = inv / ff
    th = pos[:, None] * freq_scale * inv[None, :]
    c = (np.cos(th) * mscale)[:, None, :]
    s = (np.sin(th) * mscale)[:, None, :]
    xr, rest = x[..., :n_rot], x[..., n_rot:]
    if neox:
        a, b = xr[..., :half], xr[..., half:]
        out = np.concatenate([a * c - b * s, a * s + b * c], -1)
    else:
        a, b = xr[..., 0::2], xr[..., 1::2]
        out = np.stack([a * c - b * s, a * s + b * c], -1).reshape(xr.shape)
    return np.concatenate([out, rest], -1)


def attend(q, k, v, pos, scale, n_swa_l):
    """q [T, H, hd], k/v [T, Hkv, hd]: causal (and, if n_swa_l, sliding-window) attention, [T, H*hd_v]."""
    T, H = q.shape[:2]
    rep = H // k.shape[1]
    kk = np.repeat(k, rep, axis=1)  # query head h reads kv head h // rep
    vv = np.repeat(v, rep, axis=1)
    s = np.einsum("qhd,khd->hqk", q * scale, kk)
    mask = pos[None, :] <= pos[:, None]
    if n_swa_l:
        mask = mask & (pos[:, None] - pos[None, :] < n_swa_l)
    s = np.where(mask[None], s, -np.inf)
    return np.einsum("hqk,khd->qhd", softmax(s, -1), vv).reshape(T, -1)


def forward_gemma4(m: Model, ids):
    """gemma4 dense (src/models/gemma4.cpp; docs/ARCH_FACTS.md, gemma4)."""
    t = m.t
    ids = np.asarray(ids)
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    E = m.key("embedding_length")
    L = m.key("block_count")
    eps = float(m.key("attention.layer_norm_rms_epsilon"))
    base = float(m.key("rope.freq_base", 10000.0))
    base_swa = float(m.key("rope.freq_base_swa", 10000.0))  # default 10000, not rope.freq_base
    factor = m.key("rope.scaling.factor")
    freq_scale = 1.0 / float(factor) if factor else 1.0
    mscale = float(m.key("rope.scaling.attn_factor", 1.0))
    pattern = m.key("attention.sliding_window_pattern")  # bool array, 1 = sliding
    assert isinstance(pattern, list) and len(pattern) == L, pattern
    n_swa = int(m.key("attention.sliding_window"))
    hd_full, hd_swa = m.key("attention.key_length"), m.key("attention.key_length_swa")
    assert hd_full == m.key("attention.value_length", hd_full)
    assert hd_swa == m.key("attention.value_length_swa", hd_swa)
    n_rot_full = m.key("rope.dimension_count", hd_full)
    n_rot_swa = m.key("rope.dimension_count_swa", hd_swa)
    shared = int(m.key("attention.shared_kv_layers", 0))
    kv_from = L - shared
    P = int(m.key("embedding_length_per_layer_input", 0))
    final_cap = float(m.key("final_logit_softcapping", 30.0))
    ff_full = t.get("rope_freqs.weight")

    x = t["token_embd.weight"][ids] * np.sqrt(float(E))  # x0, the scaled embedding
    pl = None
    if P:
        tok = (t["per_layer_token_embd.weight"][ids] * np.sqrt(float(P))).reshape(T, L, P)
        proj = ((x @ t["per_layer_model_proj.weight"].T) / np.sqrt(float(E))).reshape(T, L, P)
        proj = rms(proj, t["per_layer_proj_norm.weight"], eps)
        pl = (proj + tok) / np.sqrt(2.0)  # [T, L, P]
    kv_cache = {}
    for il in range(L):
        p = f"blk.{il}."
        sliding = bool(pattern[il])
        H = m.per_layer("attention.head_count", il)
        Hkv = m.per_layer("attention.head_count_kv", il, H)
        hd = hd_swa if sliding else hd_full
        n_rot = n_rot_swa if sliding else n_rot_full
        b = base_swa if sliding else base
        ff = None if sliding else ff_full

        h = rms(x, t[p + "attn_norm.weight"], eps)
        fused = m.has(p + "attn_qkv.weight")
        if fused:
            qkv = h @ t[p + "attn_qkv.weight"].T
            q = qkv[:, :H * hd]
        else:
            q = h @ t[p + "attn_q.weight"].T
        q = rms(q.reshape(T, H, hd), t[p + "attn_q_norm.weight"], eps)
        q = rope(q, pos, n_rot, b, freq_scale, ff, mscale, True)
        if il < kv_from:
            if fused:
                k = qkv[:, H * hd:(H + Hkv) * hd]
                v = qkv[:, (H + Hkv) * hd:(H + 2 * Hkv) * hd]
            else:
                k = h @ t[p + "attn_k.weight"].T
                v = h @ t[p + "attn_v.weight"].T if m.has(p + "attn_v.weight") else k  # raw K projection
            k = rms(k.reshape(T, Hkv, hd), t[p + "attn_k_norm.weight"], eps)
            v = rms(v.reshape(T, Hkv, hd), None, eps)
            k = rope(k, pos, n_rot, b, freq_scale, ff, mscale, True)
            kv_cache[il] = (k, v)
        else:
            src = kv_from - 2 if sliding else kv_from - 1
            assert bool(pattern[src]) == sliding, (il, src)
            k, v = kv_cache[src]
        o = attend(q, k, v, pos, 1.0, n_swa if sliding else 0) @ t[p + "attn_output.weight"].T
        a = x + rms(o, t[p + "post_attention_norm.weight"], eps)

        h = rms(a, t[p + "ffn_norm.weight"], eps)
        f = (gelu_tanh(h @ t[p + "ffn_gate.weight"].T) * (h @ t[p + "ffn_up.weight"].T)) @ t[p + "ffn_down.weight"].T
        x = a + rms(f, t[p + "post_ffw_norm.weight"], eps)
        if P:
            g = gelu_tanh(x @ t[p + "inp_gate.weight"].T) * pl[:, il, :]
            x = x + rms(g @ t[p + "proj.weight"].T, t[p + "post_norm.weight"], eps)
        if m.has(p + "layer_output_scale.weight"):
            x = x * float(t[p + "layer_output_scale.weight"].reshape(-1)[0])

    x = rms(x, t["output_norm.weight"], eps)
    out = t["output.weight"] if m.has("output.weight") else t["token_embd.weight"]
    logits = x @ out.T
    if final_cap:
        logits = final_cap * np.tanh(logits / final_cap)
    return logits


def forward(m: Model, ids, taps=None):
    """Logits [T, n_vocab]; with a list `taps`, also appends the residual stream entering each
    layer and, last, the final state before the output norm ([T, E] each: llama.cpp's layer
    inputs, Hugging Face's hidden_states)."""
    arch, t = m.arch, m.t
    if arch == "gemma4":
        assert taps is None, "no taps for gemma4"
        return forward_gemma4(m, ids)
    ids = np.asarray(ids)
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    E = m.key("embedding_length")
    L = m.key("block_count")
    eps = float(m.key("attention.layer_norm_rms_epsilon"))
    base = float(m.key("rope.freq_base", 10000.0))
    base_swa = float(m.key("rope.freq_base_swa", base))
    factor = m.key("rope.scaling.factor")
    freq_scale = 1.0 / float(factor) if factor else 1.0
    mscale = float(m.key("rope.scaling.attn_factor", 1.0))
    # rope frequency factors (llama_model::get_rope_factors)
    ff = t.get("rope_freqs.weight")
    if m.has("rope_factors_long.weight") or m.has("rope_factors_short.weight"):
        orig = m.key("rope.scaling.original_context_length", m.key("context_length"))
        ff = t["rope_factors_long.weight"] if N_CTX > orig else t["rope_factors_short.weight"]
    neox = arch not in NORM_ROPE
    # sliding window (gemma2; phi3's attention.sliding_window is ignored by llama.cpp)
    n_swa = m.key("attention.sliding_window", 4096) if arch == "gemma2" else 0
    pattern = m.key("attention.sliding_window_pattern", 2)
    attn_cap = float(m.key("attn_logit_softcapping", 50.0)) if arch == "gemma2" else 0.0
    final_cap = float(m.key("final_logit_softcapping", 30.0)) if arch == "gemma2" else 0.0

    x = t["token_embd.weight"][ids].copy()
    if arch == "gemma2":
        x *= np.sqrt(float(E))
    causal = pos[None, :] <= pos[:, None]  # [query, key]
    for il in range(L):
        if taps is not None:
            taps.append(x.copy())
        p = f"blk.{il}."
        H = m.per_layer("attention.head_count", il)
        Hkv = m.per_layer("attention.head_count_kv", il, H)
        hd = m.key("attention.key_length", E // H)
        hd_v = m.key("attention.value_length", hd)
        n_rot = m.key("rope.dimension_count", hd)
        sliding = False
        if n_swa:
            sliding = bool(pattern[il]) if isinstance(pattern, list) else (il % pattern < pattern - 1)

        h = rms(x, t[p + "attn_norm.weight"], eps)
        if m.has(p + "attn_qkv.weight"):
            qkv = h @ t[p + "attn_qkv.weight"].T
            if m.has(p + "attn_qkv.bias"):
                qkv = qkv + t[p + "attn_qkv.bias"]
            q = qkv[:, :H * hd]
            k = qkv[:, H * hd:H * hd + Hkv * hd]
            v = qkv[:, H * hd + Hkv * hd:]
        else:
            q, k, v = (h @ t[p + f"attn_{n}.weight"].T for n in "qkv")
            q, k, v = ((y + t[p + f"attn_{n}.bias"]) if m.has(p + f"attn_{n}.bias") else y
                       for n, y in zip("qkv", (q, k, v)))
        q = q.reshape(T, H, hd)
        k = k.reshape(T, Hkv, hd)
        v = v.reshape(T, Hkv, hd_v)
        if m.has(p + "attn_q_norm.weight"):
            q = rms(q, t[p + "attn_q_norm.weight"], eps)
        if m.has(p + "attn_k_norm.weight"):
            k = rms(k, t[p + "attn_k_norm.weight"], eps)
        use_rope = not (arch == "smollm3" and (il + 1) % 4 == 0)  # smollm3: NoPE every 4th layer
        if use_rope:
            b = base_swa if sliding else base
            q = rope(q, pos, n_rot, b, freq_scale, ff, mscale, neox)
            k = rope(k, pos, n_rot, b, freq_scale, ff, mscale, neox)
        if arch == "gemma2":
            scale = 1.0 / np.sqrt(E / H if L == 46 else hd)
        else:
            scale = 1.0 / np.sqrt(hd)
        rep = H // Hkv
        kk = np.repeat(k, rep, axis=1)  # query head h reads kv head h // rep
        vv = np.repeat(v, rep, axis=1)
        s = np.einsum("qhd,khd->hqk", q * scale, kk)
        if attn_cap:
            s = attn_cap * np.tanh(s / attn_cap)
        mask = causal
        if sliding:
            mask = mask & (pos[:, None] - pos[None, :] < n_swa)
        s = np.where(mask[None], s, -np.inf)
        pr = softmax(s, -1)
        o = np.einsum("hqk,khd->qhd", pr, vv).reshape(T, H * hd_v)
        o = o @ t[p + "attn_output.weight"].T
        if m.has(p + "attn_output.bias"):
            o = o + t[p + "attn_output.bias"]
        if arch == "gemma2":
            o = rms(o, t[p + "post_attention_norm.weight"], eps)
        x = x + o

        h = rms(x, t[p + "ffn_norm.weight"], eps)
        if m.has(p + "ffn_gate_inp.weight"):  # MoE: softmax over all experts, top-k, renormalise
            n_used = m.per_layer("expert_used_count", il)
            w_scale = float(m.key("expert_weights_scale", 0.0))
            probs = softmax(h @ t[p + "ffn_gate_inp.weight"].T, -1)  # [T, n_expert]
            G, U, D = t[p + "ffn_gate_exps.weight"], t[p + "ffn_up_exps.weight"], t[p + "ffn_down_exps.weight"]
            f = np.zeros_like(x)
            for ti in range(T):
                sel = np.argsort(-probs[ti], kind="stable")[:n_used]
                w = probs[ti, sel]
                w = w / max(w.sum(), 6.103515625e-5)
                if w_scale not in (0.0, 1.0):
                    w = w * w_scale
                for e, we in zip(sel, w):
                    f[ti] += we * (D[e] @ (silu(G[e] @ h[ti]) * (U[e] @ h[ti])))
        elif arch == "phi3":  # fused gate|up, SwiGLU SEQ
            up = h @ t[p + "ffn_up.weight"].T
            F = up.shape[-1] // 2
            f = (silu(up[:, :F]) * up[:, F:]) @ t[p + "ffn_down.weight"].T
        else:
            g = h @ t[p + "ffn_gate.weight"].T
            if m.has(p + "ffn_gate.bias"):
                g = g + t[p + "ffn_gate.bias"]
            u = h @ t[p + "ffn_up.weight"].T
            if m.has(p + "ffn_up.bias"):
                u = u + t[p + "ffn_up.bias"]
            act = gelu_tanh if arch == "gemma2" else silu
            f = (act(g) * u) @ t[p + "ffn_down.weight"].T
            if m.has(p + "ffn_down.bias"):
                f = f + t[p + "ffn_down.bias"]
        if arch == "gemma2":
            f = rms(f, t[p + "post_ffw_norm.weight"], eps)
        x = x + f

    if taps is not None:
        taps.append(x.copy())
    x = rms(x, t["output_norm.weight"], eps)
    out = t["output.weight"] if (m.has("output.weight") and arch != "gemma2") else t["token_embd.weight"]
    logits = x @ out.T
    if final_cap:
        logits = final_cap * np.tanh(logits / final_cap)
    return logits


def model_path(models_dir, name):
    path = os.path.join(models_dir, f"arch_{name}.gguf")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(HERE, "make_arch_fixtures.py"), "--models-only",
                        "--out", models_dir, "--only", name], check=True, stdout=subprocess.DEVNULL)
    return path


def bin_path(pattern, name, i):
    return (pattern.replace("<name>", name).replace("{name}", name)
            .replace("<i>", str(i)).replace("{i}", str(i)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated model names (default: all supported)")
    ap.add_argument("--save", help="folder for <name>_case<i>.npy float64 logits")
    ap.add_argument("--compare-bin", help="pattern of another engine's float32 logits files")
    ap.add_argument("--models", default="/tmp/specula_arch_models", help="folder of arch_<name>.gguf")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    with open(FIXTURE) as f:
        fx = json.load(f)["models"]
    names = [n for n in fx if fx[n]["arch"] in SUPPORTED]
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        bad = [n for n in names if n not in fx or fx[n]["arch"] not in SUPPORTED]
        if bad:
            print(f"error: unknown or unsupported model(s) {bad}; supported: "
                  f"{', '.join(n for n in fx if fx[n]['arch'] in SUPPORTED)}", file=sys.stderr)
            return 2
    os.makedirs(args.models, exist_ok=True)
    if args.save:
        os.makedirs(args.save, exist_ok=True)
    for name in names:
        ref = fx[name]
        m = Model(model_path(args.models, name))
        assert m.arch == ref["arch"], (m.arch, ref["arch"])
        probe = np.array(ref["probe_ids"])
        d_top = d_probe = 0.0
        agree = total = 0
        min_gap_dis = np.inf  # smallest f64 top-2 gap among llama.cpp / f64 argmax disagreements
        e_d = 0.0
        e_agree = e_total = 0
        e_missing = []
        for ci, case in enumerate(ref["cases"]):
            seq = case["prompt"] + case["greedy"]
            lg = forward(m, seq)
            assert lg.shape == (len(seq), m.n_vocab) and len(case["positions"]) == len(seq)
            if args.save:
                np.save(os.path.join(args.save, f"{name}_case{ci}.npy"), lg)
            c_top = c_probe = 0.0
            c_agree = 0
            for r, row in enumerate(case["positions"]):
                c_top = max(c_top, float(np.abs(lg[r, row["top_ids"]] - np.array(row["top_logits"])).max()))
                c_probe = max(c_probe, float(np.abs(lg[r, probe] - np.array(row["probe_logits"])).max()))
                am = int(lg[r].argmax())
                if am == row["argmax"]:
                    c_agree += 1
                else:
                    srt = np.sort(lg[r])
                    min_gap_dis = min(min_gap_dis, float(srt[-1] - srt[-2]))
            d_top, d_probe = max(d_top, c_top), max(d_probe, c_probe)
            agree += c_agree
            total += len(seq)
            line = (f"  case {ci}: {len(seq)} positions, llama.cpp max|d| top8 {c_top:.2e} probes {c_probe:.2e}, "
                    f"top-1 {c_agree}/{len(seq)}")
            if args.compare_bin:
                bp = bin_path(args.compare_bin, name, ci)
                if not os.path.exists(bp):
                    e_missing.append(bp)
                else:
                    other = np.fromfile(bp, dtype=np.float32)
                    if other.size != lg.size:
                        print(f"error: {bp} holds {other.size} floats, expected {lg.shape[0]}x{lg.shape[1]}",
                              file=sys.stderr)
                        return 1
                    other = other.reshape(lg.shape).astype(np.float64)
                    cd = float(np.abs(other - lg).max())
                    ca = int((other.argmax(1) == lg.argmax(1)).sum())
                    e_d = max(e_d, cd)
                    e_agree += ca
                    e_total += len(seq)
                    line += f"; engine max|d| {cd:.2e}, top-1 {ca}/{len(seq)}"
            if args.verbose:
                print(line)
        gap = f" (min f64 top-2 gap at a disagreement {min_gap_dis:.2e})" if agree < total else ""
        print(f"{name} [{m.arch}]: llama.cpp vs f64 max|d| top8 {d_top:.3e} probes {d_probe:.3e}, "
              f"top-1 {agree}/{total} ({100.0 * agree / total:.1f}%){gap}")
        if args.compare_bin:
            if e_total:
                print(f"{name} [{m.arch}]: engine vs f64 max|d| (all logits) {e_d:.3e}, "
                      f"top-1 {e_agree}/{e_total} ({100.0 * e_agree / e_total:.1f}%)")
            for bp in e_missing:
                print(f"{name}: missing {bp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
