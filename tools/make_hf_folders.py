"""tools/make_hf_folders.py — the tiny random-weight models of tools/make_arch_fixtures.py written a
second time as Hugging Face folders (config.json + model.safetensors, with the `safetensors`
package), so that specula can be checked to give bitwise the same logits from both.

The folder is written from the GGUF file (read back with gguf.GGUFReader), inverting what
llama.cpp's convert_hf_to_gguf.py does, with names and config keys from transformers' modeling
and configuration files (LlamaConfig, MixtralConfig, Qwen2/Qwen3/Qwen3MoeConfig, Phi3Config,
Gemma2/Gemma3TextConfig, SmolLM3Config, Ernie4_5Config):
  - tensor names: token_embd -> model.embed_tokens, blk.N.attn_q -> model.layers.N.self_attn.q_proj,
    ffn_norm -> post_attention_layernorm (pre_feedforward_layernorm for Gemma), ..., output -> lm_head;
    stacked experts -> mlp.experts.E.{gate,up,down}_proj (Qwen MoE) or block_sparse_moe.experts.E.w1/w3/w2
    (Mixtral); phi3's attn_qkv / ffn_up -> self_attn.qkv_proj / mlp.gate_up_proj;
  - shapes: GGUF lists the contiguous dimension first; safetensors is row-major (reversed);
  - Llama / SmolLM3 Q and K rows back from the interleaved RoPE order to HF's half-split order
    (the inverse of the converter's LlamaModel.permute);
  - Gemma RMSNorm gains: GGUF stores 1 + w, HF stores w;
  - rope_freqs.weight (Llama 3.1) and rope_factors_long/short (Phi-3 LongRoPE) -> rope_scaling.
Extra models for architectures that have no tiny GGUF in the arch fixtures (qwen2, gemma3) are
written here too (their GGUF and their folder); bf16 variants write both files in bf16, and one
model is sharded (model.safetensors.index.json + 2 shards).

Gemma 4 (gemma4_a: Gemma4ForCausalLM with global_head_dim / num_global_key_value_heads; gemma4_b:
Gemma4ForConditionalGeneration, its text model under text_config and "model.language_model.", a
per_layer_config, a vision and an audio tensor the mapping drops) from transformers' Gemma4TextConfig
and modeling_gemma4.py: norm gains as stored (Gemma4RMSNorm scales by w), rope_parameters
{"full_attention": proportional with partial_rotary_factor (from the count of rope_freqs' unit
factors), "sliding_attention": default}, layer_scalar, the per-layer-input tensors.
Qwen3.5 (qwen35_tiny_a: Qwen3_5ForCausalLM; qwen35_tiny_b: Qwen3_5ForConditionalGeneration with a
vision and two multi-token-prediction tensors the mapping drops) from tools/make_qwen35_fixtures.py's
GGUF files (written unchanged as qwen35_<shape>.gguf) and transformers' Qwen3_5TextConfig /
modeling_qwen3_5.py: norm gains w - 1 (Qwen3_5RMSNorm scales by 1 + w) except linear_attn.norm,
A_log = log(-ssm_a), dt_bias, conv1d [C, 1, K], value heads back from llama.cpp's tiled order to HF's
grouped by key head, rope_parameters with partial_rotary_factor and mrope_section. The converter
computes ssm_a = -exp(A_log), which does not give back every f32 ssm_a: arch_qwen35_<shape>.gguf is
the fixture with ssm_a replaced by f32(-exp(A_log)) (exp in float64, as specula's mapping), the GGUF
the converter would write from the folder; everything else is the fixture's.

MLX models (mlx*_g*): qwen2_w with its matrices quantized as mlx-lm stores them (U32 codes,
scales, biases; config.json "quantization" with per-module overrides), written by mlx_quantize from
MLX's documented definition, whose packing --check-mlx verifies against the real MLX package.

Usage: python3 tools/make_hf_folders.py --check-mlx     (needs pip install "mlx[cpu]")
       python3 tools/make_hf_folders.py --out DIR [--only NAME,...]
  writes DIR/arch_<name>.gguf and DIR/hf_<name>/ for every model of HF_MODELS (a bf16 variant's
  arch_<name>.gguf is its base model with the matrices in bf16) (numpy, gguf and
  safetensors only; the tests run it at test time — weights are never committed).
"""
import argparse
import json
import math
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_arch_fixtures as maf  # noqa: E402
import make_qwen35_fixtures as mq  # noqa: E402

# Models written only for this check (not judged by llama.cpp here: the folder must equal the GGUF
# bitwise in specula, and the GGUF path of these architectures is judged by the real-model tests).
EXTRA_SHAPES = {
    "qwen2_t": dict(arch="qwen2", seed=4901, E=64, L=3, H=4, Hkv=2, hd=None, F=160, V=256, tied=True, dt=maf.F32,
                    embd=0.5, base=1000000.0, shape="qwen2 with q/k/v biases, n_embd 64, 3 layers, GQA 2, tied"),
    "qwen2_w": dict(arch="qwen2", seed=4903, E=256, L=2, H=4, Hkv=2, hd=None, F=512, V=512, tied=False, dt=maf.F32,
                    embd=0.5, base=1000000.0, shape="qwen2, n_embd 256 (rows of whole Q4_K blocks), n_ff 512, untied"),
    "gemma3_t": dict(arch="gemma3", seed=4902, E=64, L=7, H=4, Hkv=1, hd=32, F=128, V=256, tied=True, dt=maf.F32,
                     embd=0.06, base=1000000.0, base_swa=10000.0, swa=6, out_norm=6.0,
                     shape="gemma3: 7 layers (pattern 6: layer 5 global), window 6, q/k norms, head_dim 32"),
}
maf.SHAPES.update(EXTRA_SHAPES)

# name -> (HF architecture, options). "bf16": write both files in bf16; "shards": index + N files.
HF_MODELS = {
    "llama_a": ("LlamaForCausalLM", {}),
    "llama_b": ("MistralForCausalLM", {"shards": 2}),
    "llama_c": ("LlamaForCausalLM", {}),
    "llama_d": ("MixtralForCausalLM", {}),
    "qwen2_t": ("Qwen2ForCausalLM", {}),
    "qwen2_t_bf16": ("Qwen2ForCausalLM", {"bf16": True, "base": "qwen2_t"}),
    "qwen2_w": ("Qwen2ForCausalLM", {"q8_0": True}),
    # MLX affine quantization of qwen2_w (mlx-lm layout); each also writes hf_<name>_deq/, the
    # dequantized weights in f32, the reference.
    "mlx4_g32": ("Qwen2ForCausalLM", {"base": "qwen2_w", "mlx": dict(bits=4, group_size=32, dtype="bf16")}),
    "mlx4_g64": ("Qwen2ForCausalLM", {"base": "qwen2_w", "mlx": dict(
        bits=4, group_size=64, dtype="f16",
        overrides={"model.layers.1.mlp.down_proj": {"group_size": 32, "bits": 8}, "lm_head": False})}),
    "mlx8_g32": ("Qwen2ForCausalLM", {"base": "qwen2_w", "mlx": dict(bits=8, group_size=32, dtype="bf16")}),
    "mlx8_g64": ("Qwen2ForCausalLM", {"base": "qwen2_w", "mlx": dict(bits=8, group_size=64, dtype="f16")}),
    "mlx2_g64": ("Qwen2ForCausalLM", {"base": "qwen2_w", "mlx": dict(bits=2, group_size=64, dtype="bf16")}),
    "mlx3_g32": ("Qwen2ForCausalLM", {"base": "qwen2_w", "mlx": dict(bits=3, group_size=32, dtype="bf16")}),
    "mlx6_g64": ("Qwen2ForCausalLM", {"base": "qwen2_w", "mlx": dict(bits=6, group_size=64, dtype="f16")}),
    "qwen3_a": ("Qwen3ForCausalLM", {}),
    "qwen3_b": ("Qwen3ForCausalLM", {}),
    "qwen3moe_a": ("Qwen3MoeForCausalLM", {}),
    "qwen3moe_b": ("Qwen3MoeForCausalLM", {}),
    "qwen3moe_b_bf16": ("Qwen3MoeForCausalLM", {"bf16": True, "base": "qwen3moe_b"}),
    "phi3_a": ("Phi3ForCausalLM", {}),
    "phi3_b": ("Phi3ForCausalLM", {}),
    "gemma2_a": ("Gemma2ForCausalLM", {}),
    "gemma2_b": ("Gemma2ForCausalLM", {}),
    "gemma3_t": ("Gemma3ForCausalLM", {}),
    "smollm3_a": ("SmolLM3ForCausalLM", {}),
    "smollm3_b_bf16": ("SmolLM3ForCausalLM", {"bf16": True, "base": "smollm3_b"}),
    "ernie4_5_a": ("Ernie4_5ForCausalLM", {}),
    "gemma4_a": ("Gemma4ForCausalLM", {}),
    "gemma4_b": ("Gemma4ForConditionalGeneration", {"multimodal": True}),
    # "qwen35": the shape of tools/make_qwen35_fixtures.py (its GGUF, not make_arch_fixtures')
    "qwen35_tiny_a": ("Qwen3_5ForCausalLM", {"qwen35": "tiny_a"}),
    "qwen35_tiny_b": ("Qwen3_5ForConditionalGeneration", {"qwen35": "tiny_b", "multimodal": True}),
}


def write_qwen2(b):
    s = b.s
    E, L, H, Hkv, F, V = s["E"], s["L"], s["H"], s["Hkv"], s["F"], s["V"]
    hd = E // H
    maf.common_kv(b)
    b.vocab()
    b.embeddings(E, V)
    b.output(E, V)
    for il in range(L):
        p = f"blk.{il}."
        b.tensor(p + "attn_norm.weight", b.norm(E))
        b.tensor(p + "attn_q.weight", b.mat(H * hd, E))
        b.tensor(p + "attn_k.weight", b.mat(Hkv * hd, E))
        b.tensor(p + "attn_v.weight", b.mat(Hkv * hd, E))
        b.tensor(p + "attn_q.bias", 0.3 * b.rng.standard_normal(H * hd))
        b.tensor(p + "attn_k.bias", 0.3 * b.rng.standard_normal(Hkv * hd))
        b.tensor(p + "attn_v.bias", 0.3 * b.rng.standard_normal(Hkv * hd))
        b.tensor(p + "attn_output.weight", b.mat(E, H * hd))
        b.tensor(p + "ffn_norm.weight", b.norm(E))
        b.tensor(p + "ffn_gate.weight", b.mat(F, E))
        b.tensor(p + "ffn_up.weight", b.mat(F, E))
        b.tensor(p + "ffn_down.weight", b.mat(E, F))


def write_gemma3(b):
    s = b.s
    E, L, H, Hkv, F, V, hd = s["E"], s["L"], s["H"], s["Hkv"], s["F"], s["V"], s["hd"]
    maf.common_kv(b, hd=hd)
    b.u32("attention.sliding_window", s["swa"])
    b.f32("rope.freq_base_swa", s["base_swa"])
    b.vocab()
    b.embeddings(E, V)
    b.tensor("output_norm.weight", b.norm(E, s.get("out_norm", 1.0)))
    for il in range(L):
        p = f"blk.{il}."
        b.tensor(p + "attn_norm.weight", b.norm(E))
        b.tensor(p + "attn_q.weight", b.mat(H * hd, E, 2.0))
        b.tensor(p + "attn_k.weight", b.mat(Hkv * hd, E, 2.0))
        b.tensor(p + "attn_v.weight", b.mat(Hkv * hd, E))
        b.tensor(p + "attn_q_norm.weight", b.norm(hd))
        b.tensor(p + "attn_k_norm.weight", b.norm(hd))
        b.tensor(p + "attn_output.weight", b.mat(E, H * hd))
        b.tensor(p + "post_attention_norm.weight", b.norm(E))
        b.tensor(p + "ffn_norm.weight", b.norm(E))
        b.tensor(p + "ffn_gate.weight", b.mat(F, E))
        b.tensor(p + "ffn_up.weight", b.mat(F, E))
        b.tensor(p + "ffn_down.weight", b.mat(E, F))
        b.tensor(p + "post_ffw_norm.weight", b.norm(E))


maf.WRITERS.update({"qwen2": write_qwen2, "gemma3": write_gemma3})


# --- GGUF -> HF ------------------------------------------------------------------------------------
def read_gguf(path):
    import gguf

    r = gguf.GGUFReader(path)
    kv = {}
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name.startswith("tokenizer."):
            continue
        vals = [f.parts[i] for i in f.data]
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            kv[f.name] = bytes(vals[0]).decode()
        elif f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            kv[f.name] = [v.tolist()[0] for v in vals]
        else:
            kv[f.name] = vals[0].tolist()[0]
    tensors = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]  # row-major
        if t.tensor_type == gguf.GGMLQuantizationType.BF16:
            data = np.frombuffer(np.asarray(t.data).tobytes(), dtype=np.uint16).reshape(shape)
        else:
            data = np.array(t.data).reshape(shape)
        tensors[t.name] = (data, t.tensor_type)
    return kv, tensors


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf's LlamaModel.permute (rows of one head: interleaved -> halves)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}  # what make_arch_fixtures' rope_freqs were made from


def hf_config(hf_arch, kv, tensors, llama3_rope=None):
    """config.json from GGUF metadata (the keys convert_hf_to_gguf.py writes, inverted). rope_freqs
    (Llama 3.1) cannot be inverted: its parameters come as llama3_rope."""
    a = kv["general.architecture"]
    g = lambda k, d=None: kv.get(f"{a}.{k}", d)  # noqa: E731
    E, H = g("embedding_length"), g("attention.head_count")
    c = {
        "architectures": [hf_arch],
        "hidden_size": E,
        "num_hidden_layers": g("block_count"),
        "num_attention_heads": H,
        "num_key_value_heads": g("attention.head_count_kv", H),
        "max_position_embeddings": g("context_length"),
        "rms_norm_eps": g("attention.layer_norm_rms_epsilon"),
        "rope_theta": g("rope.freq_base", 10000.0),
        "vocab_size": int(tensors["token_embd.weight"][0].shape[0]),
        "tie_word_embeddings": "output.weight" not in tensors,
        "torch_dtype": "float32",
    }
    ff = g("feed_forward_length")
    if ff is not None:
        c["intermediate_size"] = ff
    if g("attention.key_length") is not None:
        c["head_dim"] = g("attention.key_length")
    if "rope_freqs.weight" in tensors and a != "gemma4":  # gemma4's: rope_parameters (gemma4_config)
        if llama3_rope is None:
            raise SystemExit("rope_freqs.weight: pass the llama3 rope_scaling parameters")
        c["rope_scaling"] = dict(llama3_rope)
    if g("rope.scaling.type") == "linear":
        c["rope_scaling"] = {"rope_type": "linear", "factor": g("rope.scaling.factor")}
    if hf_arch == "MixtralForCausalLM":
        c["num_local_experts"] = g("expert_count")
        c["num_experts_per_tok"] = g("expert_used_count")
    if a == "qwen3moe":
        c.update(num_experts=g("expert_count"), num_experts_per_tok=g("expert_used_count"),
                 moe_intermediate_size=g("expert_feed_forward_length"), norm_topk_prob=True, decoder_sparse_step=1,
                 mlp_only_layers=[])
    if a == "phi3":
        n_rot = g("rope.dimension_count")
        c["partial_rotary_factor"] = n_rot * H / E
        if "rope_factors_long.weight" in tensors:
            c["original_max_position_embeddings"] = g("rope.scaling.original_context_length")
            c["rope_scaling"] = {"type": "longrope",
                                 "long_factor": [float(x) for x in tensors["rope_factors_long.weight"][0]],
                                 "short_factor": [float(x) for x in tensors["rope_factors_short.weight"][0]]}
        if g("attention.sliding_window") is not None:
            c["sliding_window"] = g("attention.sliding_window")
    if a in ("gemma2", "gemma3"):
        hd = g("attention.key_length")
        c.update(sliding_window=g("attention.sliding_window"), query_pre_attn_scalar=hd,
                 hidden_activation="gelu_pytorch_tanh")
        if a == "gemma2":
            c.update(attn_logit_softcapping=g("attn_logit_softcapping", 50.0),
                     final_logit_softcapping=g("final_logit_softcapping", 30.0))
        else:
            pattern = g("attention.sliding_window_pattern", 6)
            c.update(rope_local_base_freq=g("rope.freq_base_swa", 10000.0),
                     final_logit_softcapping=g("final_logit_softcapping"), attn_logit_softcapping=None,
                     layer_types=["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                                  for i in range(g("block_count"))])
    if a == "smollm3":
        c["no_rope_layers"] = [0 if (i + 1) % 4 == 0 else 1 for i in range(g("block_count"))]
    if a == "qwen2":
        c["use_sliding_window"] = False
    if a == "gemma4":
        gemma4_config(c, g, tensors)
    if a == "qwen35":
        qwen35_config(c, g)
    return c


def gemma4_config(c, g, tensors):
    """Gemma4TextConfig keys (transformers 5 configuration_gemma4.py) from the gemma4 GGUF metadata."""
    L = g("block_count")
    swa = [bool(x) for x in g("attention.sliding_window_pattern")]
    n_shared = g("attention.shared_kv_layers", 0)
    hd_full, hd_swa = g("attention.key_length"), g("attention.key_length_swa")
    ff = g("feed_forward_length")
    if isinstance(ff, list):  # use_double_wide_mlp: the KV-shared layers are twice as wide
        assert ff == [ff[0] if i < L - n_shared else 2 * ff[0] for i in range(L)], ff
        c.update(intermediate_size=ff[0], use_double_wide_mlp=True)
    else:
        c.update(intermediate_size=ff, use_double_wide_mlp=False)
    kv = g("attention.head_count_kv")
    kv_list = kv if isinstance(kv, list) else [kv] * L
    kv_swa = next(k for k, s in zip(kv_list, swa) if s)
    kv_full = next(k for k, s in zip(kv_list, swa) if not s)
    # The full layers' K = V (no attn_v where attn_k is): attention_k_eq_v.
    k_eq_v = any(f"blk.{i}.attn_k.weight" in tensors and f"blk.{i}.attn_v.weight" not in tensors
                 for i in range(L) if not swa[i])
    freqs = tensors["rope_freqs.weight"][0]
    n_rot_pairs = int(np.sum(freqs == np.float32(1.0)))
    assert np.all(freqs[:n_rot_pairs] == 1.0) and np.all(freqs[n_rot_pairs:] == np.float32(1e30))
    P = g("embedding_length_per_layer_input", 0)
    c.pop("rope_theta")
    c.update(model_type="gemma4_text", head_dim=hd_swa, num_key_value_heads=kv_swa,
             sliding_window=g("attention.sliding_window"),
             layer_types=["sliding_attention" if s else "full_attention" for s in swa],
             num_kv_shared_layers=n_shared, hidden_size_per_layer_input=P,
             vocab_size_per_layer_input=int(tensors["per_layer_token_embd.weight"][0].shape[0]) if P else c["vocab_size"],
             final_logit_softcapping=g("final_logit_softcapping"), attention_k_eq_v=k_eq_v,
             hidden_activation="gelu_pytorch_tanh", attention_bias=False, enable_moe_block=False,
             use_bidirectional_attention=None,
             rope_parameters={"full_attention": {"rope_type": "proportional",
                                                 "partial_rotary_factor": 2 * n_rot_pairs / hd_full,
                                                 "rope_theta": g("rope.freq_base")},
                              "sliding_attention": {"rope_type": "default", "rope_theta": g("rope.freq_base_swa")}})
    if c["architectures"][0] == "Gemma4ForCausalLM":  # the form of Google's configs
        c["global_head_dim"] = hd_full
        if isinstance(kv, list):
            c["num_global_key_value_heads"] = kv_full
    else:  # transformers 5's per-layer form: the full layers' overrides
        c["per_layer_config"] = {str(i): dict(head_dim=hd_full, **({"num_key_value_heads": kv_full} if kv_full != kv_swa
                                                                   else {}))
                                 for i in range(L) if not swa[i]}


def qwen35_config(c, g):
    """Qwen3_5TextConfig keys (transformers 5 configuration_qwen3_5.py) from the qwen35 GGUF metadata; a
    multi-token-prediction block (nextn_predict_layers) is counted by mtp_num_hidden_layers."""
    n_mtp = g("nextn_predict_layers", 0)
    L = g("block_count") - n_mtp
    rec = g("attention.recurrent_layers")
    if rec is None:
        rec = [(i + 1) % g("full_attention_interval") != 0 for i in range(L)]
    rec = list(rec)[:L]
    c["num_hidden_layers"] = L
    if n_mtp:
        c["mtp_num_hidden_layers"] = n_mtp
    hd = g("attention.key_length")
    sections = list(g("rope.dimension_sections"))
    if sections[3] == 0:  # the usual three (time, height, width); the converter pads with 0
        sections = sections[:3]
    hv = g("ssm.time_step_rank")
    c.pop("rope_theta")
    c.update(model_type="qwen3_5_text", layer_types=["linear_attention" if r else "full_attention" for r in rec],
             linear_conv_kernel_dim=g("ssm.conv_kernel"), linear_key_head_dim=g("ssm.state_size"),
             linear_value_head_dim=g("ssm.inner_size") // hv, linear_num_key_heads=g("ssm.group_count"),
             linear_num_value_heads=hv, hidden_act="silu", attention_bias=False,
             rope_parameters={"rope_type": "default", "rope_theta": g("rope.freq_base", 10000.0),
                              "partial_rotary_factor": g("rope.dimension_count") / hd,
                              "mrope_section": sections, "mrope_interleaved": True})


LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight", "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
}
GEMMA_NAMES = {"post_attention_norm.weight": "post_attention_layernorm.weight",
               "ffn_norm.weight": "pre_feedforward_layernorm.weight",
               "post_ffw_norm.weight": "post_feedforward_layernorm.weight"}


def hf_tensors(hf_arch, kv, tensors):
    """HF tensors from GGUF ones (names, Q/K order, Gemma norms, experts), numpy arrays."""
    a = kv["general.architecture"]
    H = kv[f"{a}.attention.head_count"]
    Hkv = kv.get(f"{a}.attention.head_count_kv", H)
    gemma = a in ("gemma2", "gemma3")
    mixtral = hf_arch == "MixtralForCausalLM"
    if a == "gemma4":
        return gemma4_tensors(tensors)
    if a == "qwen35":
        return qwen35_tensors(kv, tensors)
    out = {}
    for gname, (data, _) in tensors.items():
        if gname in ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"):
            continue  # in config.json's rope_scaling
        if gname == "token_embd.weight":
            out["model.embed_tokens.weight"] = data
            continue
        if gname == "output_norm.weight":
            out["model.norm.weight"] = (data - np.float32(1)) if gemma else data
            continue
        if gname == "output.weight":
            out["lm_head.weight"] = data
            continue
        _, il, rest = gname.split(".", 2)
        p = f"model.layers.{il}."
        if rest.endswith("_exps.weight"):
            kind = rest.split("_")[1]  # gate / up / down
            for e in range(data.shape[0]):
                if mixtral:
                    out[p + f"block_sparse_moe.experts.{e}." + {"gate": "w1", "up": "w3", "down": "w2"}[kind] +
                        ".weight"] = data[e]
                else:
                    out[p + f"mlp.experts.{e}.{kind}_proj.weight"] = data[e]
            continue
        if rest == "ffn_gate_inp.weight":
            out[p + ("block_sparse_moe.gate.weight" if mixtral else "mlp.gate.weight")] = data
            continue
        if a == "phi3" and rest == "ffn_up.weight":
            out[p + "mlp.gate_up_proj.weight"] = data
            continue
        hname = GEMMA_NAMES.get(rest) if gemma else None
        hname = hname or LAYER_NAMES[rest]
        if a in ("llama", "smollm3") and rest.startswith(("attn_q.", "attn_k.")):
            data = unpermute(data, H if rest.startswith("attn_q.") else Hkv)
        if gemma and rest.endswith("norm.weight"):
            data = data - np.float32(1)
        out[p + hname] = data
    return out


GEMMA4_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                 "output.weight": "lm_head.weight", "per_layer_token_embd.weight": "model.embed_tokens_per_layer.weight",
                 "per_layer_model_proj.weight": "model.per_layer_model_projection.weight",
                 "per_layer_proj_norm.weight": "model.per_layer_projection_norm.weight"}
GEMMA4_NAMES = {**{k: v for k, v in LAYER_NAMES.items() if not k.endswith(".bias")}, **GEMMA_NAMES,
                "inp_gate.weight": "per_layer_input_gate.weight", "proj.weight": "per_layer_projection.weight",
                "post_norm.weight": "post_per_layer_input_norm.weight",
                "layer_output_scale.weight": "layer_scalar"}  # a buffer of Gemma4TextDecoderLayer


def gemma4_tensors(tensors):
    """Gemma4ForCausalLM tensors: names only (Gemma 4 stores its RMSNorm gains as used)."""
    out = {}
    for gname, (data, _) in tensors.items():
        if gname == "rope_freqs.weight":
            continue  # rope_parameters.full_attention.partial_rotary_factor
        if gname in GEMMA4_GLOBAL:
            out[GEMMA4_GLOBAL[gname]] = data
            continue
        _, il, rest = gname.split(".", 2)
        out[f"model.layers.{il}." + GEMMA4_NAMES[rest]] = data
    return out


QWEN35_NAMES = {"attn_norm.weight": "input_layernorm.weight", "post_attention_norm.weight": "post_attention_layernorm.weight",
                "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
                "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
                "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
                "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
                "ffn_down.weight": "mlp.down_proj.weight",
                "attn_qkv.weight": "linear_attn.in_proj_qkv.weight", "attn_gate.weight": "linear_attn.in_proj_z.weight",
                "ssm_beta.weight": "linear_attn.in_proj_b.weight", "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
                "ssm_a": "linear_attn.A_log", "ssm_dt.bias": "linear_attn.dt_bias",
                "ssm_conv1d.weight": "linear_attn.conv1d.weight", "ssm_norm.weight": "linear_attn.norm.weight",
                "ssm_out.weight": "linear_attn.out_proj.weight"}


def a_log_of(ssm_a):
    """Qwen3.5's A_log (f32) for GGUF's ssm_a = -exp(A_log)."""
    return np.log(-ssm_a.astype(np.float64)).astype(np.float32)


def ssm_a_of(a_log):
    """-exp(A_log) as specula's mapping computes it: exp in float64 (libm, as C++ std::exp), rounded to f32."""
    return np.array([-math.exp(float(x)) for x in a_log], dtype=np.float32)


def untile_heads(x, axis, hk, per_k, unit):
    """Value heads from llama.cpp's tiled order [per_k, hk, unit] back to HF's grouped by key head
    [hk, per_k, unit] along `axis` (the inverse of the converter's _reorder_v_heads)."""
    x = np.moveaxis(x, axis, 0)
    y = x.reshape(per_k, hk, unit, *x.shape[1:]).swapaxes(0, 1).reshape(x.shape)
    return np.moveaxis(y, 0, axis)


def qwen35_tensors(kv, tensors):
    """Qwen3_5ForCausalLM tensors (modeling_qwen3_5.py) from the qwen35 GGUF ones; the MTP block
    (blk.L.*, L the trunk's layers) as the checkpoints hold it: mtp.fc, mtp.pre_fc_norm_embedding /
    _hidden, mtp.norm and mtp.layers.0.* (the converter's _QwenMtpMixin, inverted)."""
    hk, hv = kv["qwen35.ssm.group_count"], kv["qwen35.ssm.time_step_rank"]
    trunk = kv["qwen35.block_count"] - kv.get("qwen35.nextn_predict_layers", 0)
    mtp_names = {"nextn.eh_proj.weight": "mtp.fc.weight", "nextn.enorm.weight": "mtp.pre_fc_norm_embedding.weight",
                 "nextn.hnorm.weight": "mtp.pre_fc_norm_hidden.weight", "nextn.shared_head_norm.weight": "mtp.norm.weight"}
    dk, dv = kv["qwen35.ssm.state_size"], kv["qwen35.ssm.inner_size"] // hv
    one = np.float32(1)
    out = {}
    for gname, (data, _) in tensors.items():
        if gname == "token_embd.weight":
            out["model.embed_tokens.weight"] = data
            continue
        if gname == "output_norm.weight":
            out["model.norm.weight"] = data - one
            continue
        if gname == "output.weight":
            out["lm_head.weight"] = data
            continue
        _, il, rest = gname.split(".", 2)
        if int(il) >= trunk:
            if rest in mtp_names:
                out[mtp_names[rest]] = data - one if rest.endswith("norm.weight") else data
                continue
            if rest.startswith("nextn."):
                raise SystemExit(f"{gname}: no Hugging Face name for it (Qwen3.5's MTP block shares the model's)")
            if rest.endswith("norm.weight"):
                data = data - one
            out[f"mtp.layers.{int(il) - trunk}." + QWEN35_NAMES[rest]] = np.ascontiguousarray(data)
            continue
        if rest == "ssm_a":
            data = a_log_of(data)
        if rest.endswith("norm.weight") and rest != "ssm_norm.weight":
            data = data - one  # Qwen3_5RMSNorm: x * (1 + w)
        if hk != hv:  # grouped by key head in HF
            r = hv // hk
            if rest == "attn_qkv.weight":
                data = np.concatenate([data[:2 * hk * dk], untile_heads(data[2 * hk * dk:], 0, hk, r, dv)])
            elif rest == "ssm_conv1d.weight":
                data = np.concatenate([data[:2 * hk * dk], untile_heads(data[2 * hk * dk:], 0, hk, r, dv)])
            elif rest == "attn_gate.weight":
                data = untile_heads(data, 0, hk, r, dv)
            elif rest in ("ssm_beta.weight", "ssm_alpha.weight", "ssm_a", "ssm_dt.bias"):
                data = untile_heads(data, 0, hk, r, 1)
            elif rest == "ssm_out.weight":
                data = untile_heads(data, 1, hk, r, dv)
        if rest == "ssm_conv1d.weight":
            data = data.reshape(data.shape[0], 1, data.shape[1])  # nn.Conv1d(groups=C): [C, 1, K]
        out[f"model.layers.{il}." + QWEN35_NAMES[rest]] = np.ascontiguousarray(data)
    return out


def as_multimodal(hf_arch, cfg, out):
    """The ...ForConditionalGeneration form: the text config under text_config, the text model's
    tensors under model.language_model., and a few tensors of the other towers (and, for Qwen3.5, its
    multi-token-prediction block) that a text-only load drops."""
    top = {"architectures": [hf_arch], "tie_word_embeddings": cfg["tie_word_embeddings"],
           "torch_dtype": cfg["torch_dtype"]}
    text = {k: v for k, v in cfg.items() if k not in ("architectures",)}
    rng = np.random.default_rng(5)
    E = cfg["hidden_size"]
    extra = {}
    if hf_arch == "Gemma4ForConditionalGeneration":
        top.update(model_type="gemma4", vision_config={"model_type": "gemma4_vision", "hidden_size": 8},
                   audio_config={"model_type": "gemma4_audio", "hidden_size": 8})
        extra = {"model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight": (8, 8),
                 "model.embed_vision.embedding_projection.weight": (E, 8),
                 "model.audio_tower.layers.0.norm_out.weight": (8,)}
    else:
        top.update(model_type="qwen3_5", vision_config={"model_type": "qwen3_5_vision", "hidden_size": 8})
        extra = {"model.visual.blocks.0.attn.qkv.weight": (24, 8), "mtp.fc.weight": (E, 2 * E),
                 "mtp.layers.0.input_layernorm.weight": (E,)}
    top["text_config"] = text
    mm = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v for k, v in out.items()}
    for k, shape in extra.items():
        mm[k] = rng.standard_normal(shape).astype(np.float32)
    return top, mm


def to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (as torch)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_bf16_gguf(src, dst, kind="bf16"):
    """A copy of the GGUF at `src` with every matrix (>= 2-D) in bf16, or with kind "q8_0" in Q8_0
    by the gguf package's quantizer (bit-exact with ggml's reference, as specula's --quantize q8_0), or
    with kind "ssm_a" every tensor as stored but qwen35's ssm_a replaced by ssm_a_of(a_log_of(ssm_a))."""
    import gguf
    from gguf import quants

    kv, tensors = read_gguf(src)
    r = gguf.GGUFReader(src)
    arch = kv["general.architecture"]
    w = gguf.GGUFWriter(dst, arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vals = [f.parts[i] for i in f.data]
        t = f.types[0]
        if t == gguf.GGUFValueType.STRING:
            w.add_string(f.name, bytes(vals[0]).decode())
        elif t == gguf.GGUFValueType.ARRAY:
            sub = f.types[1]
            items = [bytes(v).decode() if sub == gguf.GGUFValueType.STRING else v.tolist()[0] for v in vals]
            w.add_array(f.name, items)
        elif t == gguf.GGUFValueType.UINT32:
            w.add_uint32(f.name, int(vals[0][0]))
        elif t == gguf.GGUFValueType.FLOAT32:
            w.add_float32(f.name, float(vals[0][0]))
        elif t == gguf.GGUFValueType.BOOL:
            w.add_bool(f.name, bool(vals[0][0]))
        else:
            raise SystemExit(f"write_bf16_gguf: metadata type {t} of {f.name} not handled")
    for name, (data, _) in tensors.items():
        if kind == "ssm_a":  # every tensor as stored but qwen35's ssm_a, as the converter makes it from A_log
            w.add_tensor(name, ssm_a_of(a_log_of(data)) if name.endswith(".ssm_a") else data)
        elif data.ndim >= 2 and kind == "q8_0":
            q = quants.quantize(data.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        elif data.ndim >= 2:
            w.add_tensor(name, to_bf16_bits(data.astype(np.float32)), raw_shape=data.shape,
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, data.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_folder(name, gguf_path, folder):
    from safetensors.numpy import save_file

    hf_arch, opts = HF_MODELS[name]
    kv, tensors = read_gguf(gguf_path)
    base = opts.get("base", name)
    cfg = hf_config(hf_arch, kv, tensors, LLAMA3_ROPE if maf.SHAPES.get(base, {}).get("llama3_rope") else None)
    out = hf_tensors(hf_arch, kv, tensors)
    if opts.get("multimodal"):
        cfg, out = as_multimodal(hf_arch, cfg, out)
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    if opts.get("mlx"):
        out = write_mlx(out, cfg, opts["mlx"], tmp)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
        folder, tmp = folder + "_deq", folder + "_deq.tmp"  # then the dequantized reference, in f32
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if opts.get("bf16"):
        cfg["torch_dtype"] = "bfloat16"
    arrays = {}
    for k, v in out.items():
        if v.dtype == np.uint16:  # bf16 bits from a bf16 GGUF
            arrays[k] = v
        else:
            arrays[k] = np.ascontiguousarray(v)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    bf16_names = [k for k, v in arrays.items() if v.dtype == np.uint16]
    n = opts.get("shards", 1)
    names = sorted(arrays)
    files = {}
    for i in range(n):
        part = {k: arrays[k] for k in names[i::n]}
        fname = "model.safetensors" if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        files[fname] = part
    for fname, part in files.items():
        path = os.path.join(tmp, fname)
        save_file(part, path, metadata={"format": "pt"})
        if bf16_names:
            retag_bf16(path, set(bf16_names))
    if n > 1:
        index = {"metadata": {"total_size": int(sum(v.nbytes for v in arrays.values()))},
                 "weight_map": {k: f for f, part in files.items() for k in part}}
        with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=1)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def mlx_quantize(w, bits, group_size, dtype):
    """MLX affine quantization as its documentation defines it (mlx.core.quantize): per group of
    group_size along the last axis, scale = (max - min) / (2^bits - 1), bias = min, stored in the
    model dtype; codes q = round((w - bias) / scale) in [0, 2^bits - 1], packed into uint32 words
    with the first elements in the lowest bits (a little-endian bit stream per row, so 3- and 6-bit
    codes run across words); w ~ scale * q + bias. Returns (packed uint32 [N, K*bits/32], scales,
    biases (bf16 bits as uint16, or float16), dequantized float32 [N, K])."""
    N, K = w.shape
    g = w.astype(np.float32).reshape(N, K // group_size, group_size)
    wmax, wmin = g.max(-1), g.min(-1)
    scale = (wmax - wmin) / np.float32(2 ** bits - 1)
    scale = np.where(scale == 0, np.float32(1e-6), scale).astype(np.float32)
    if dtype == "bf16":
        s_store, b_store = to_bf16_bits(scale), to_bf16_bits(wmin)
        s, b = from_bf16_bits(s_store), from_bf16_bits(b_store)
    else:
        s_store, b_store = scale.astype(np.float16), wmin.astype(np.float16)
        s, b = s_store.astype(np.float32), b_store.astype(np.float32)
    q = np.clip(np.round((g - b[..., None]) / s[..., None]), 0, 2 ** bits - 1).astype(np.uint32)
    deq = (s[..., None] * q.astype(np.float32) + b[..., None]).astype(np.float32).reshape(N, K)
    codes = q.reshape(N, K)
    bitplanes = ((codes[..., None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8).reshape(N, K * bits)
    packed = np.packbits(bitplanes, axis=1, bitorder="little").view("<u4")
    return packed, s_store, b_store, deq


def check_against_mlx():
    """Cross-checks mlx_quantize's packing with the real MLX (pip install "mlx[cpu]"): MLX's own
    dequantize of our codes, scales and biases must give our dequantized weights up to its
    rounding (it computes scale * q + bias in the scales' dtype, bf16 or f16); a code read from
    the wrong bits would be off by a whole scale step."""
    import mlx.core as mx

    rng = np.random.default_rng(0)
    for bits in (2, 3, 4, 5, 6, 8):
        for gs in (32, 64, 128):
            for dt in ("bf16", "f16"):
                w = rng.standard_normal((8, 256)).astype(np.float32)
                p, sc, bi, deq = mlx_quantize(w, bits, gs, dt)
                if dt == "bf16":
                    S, B = (mx.array(from_bf16_bits(x)).astype(mx.bfloat16) for x in (sc, bi))
                else:
                    S, B = mx.array(sc), mx.array(bi)
                d = np.array(mx.dequantize(mx.array(p), S, B, group_size=gs, bits=bits).astype(mx.float32))
                ulp = 2.0 ** (-7 if dt == "bf16" else -10)
                b = np.repeat(from_bf16_bits(bi) if dt == "bf16" else bi.astype(np.float32), gs, axis=1)
                # MLX computes scale * q + bias in the scales' dtype: two roundings of operands this big
                bad = np.abs(d - deq) > (np.abs(deq - b) + np.abs(b)) * 2 * ulp + 1e-6
                if bad.any():
                    raise SystemExit(f"bits {bits} group {gs} {dt}: MLX dequantizes our codes differently "
                                     f"(max |d| {np.abs(d - deq).max()})")
    print(f"mlx {mx.__version__}: dequantize of our codes equals ours within its output rounding "
          "(bits 2, 3, 4, 5, 6, 8; groups 32, 64, 128; bf16 and f16 scales)")


def write_mlx(out, cfg, spec, folder):
    """An mlx-lm style folder of the HF tensors `out`; returns the dequantized f32 tensors."""
    from safetensors.numpy import save_file

    overrides = spec.get("overrides", {})
    arrays, deq_all = {}, {}
    for k, v in out.items():
        module = k[: -len(".weight")] if k.endswith(".weight") else None
        q = overrides.get(module, spec) if module else None
        if v.ndim == 2 and q:
            packed, sc, bi, deq = mlx_quantize(v, q["bits"], q["group_size"], spec["dtype"])
            arrays[k], arrays[module + ".scales"], arrays[module + ".biases"] = packed, sc, bi
            deq_all[k] = deq
        else:
            arrays[k] = np.ascontiguousarray(v, dtype=np.float32)
            deq_all[k] = arrays[k]
    cfg = dict(cfg)
    qc = {"group_size": spec["group_size"], "bits": spec["bits"]}
    qc.update(overrides)
    cfg["quantization"] = qc
    cfg["quantization_config"] = qc
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    path = os.path.join(folder, "model.safetensors")
    save_file(arrays, path, metadata={"format": "mlx"})
    if spec["dtype"] == "bf16":
        retag_bf16(path, {k for k, v in arrays.items() if v.dtype == np.uint16})
    return deq_all


def retag_bf16(path, names):
    """safetensors.numpy has no bfloat16: the bits were saved as U16; relabel them BF16 (data
    offsets are relative to the data buffer, so the data is copied unchanged after the new header)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    for k in names:
        if k in header:
            assert header[k]["dtype"] == "U16"
            header[k]["dtype"] = "BF16"
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", help="comma-separated names (default: all of HF_MODELS)")
    ap.add_argument("--check-mlx", action="store_true", help="only cross-check the MLX packing with mlx (pip)")
    args = ap.parse_args()
    if args.check_mlx:
        check_against_mlx()
        return 0
    names = [n for n in (args.only.split(",") if args.only else HF_MODELS) if n]
    for n in names:
        if n not in HF_MODELS:
            print(f"error: unknown model {n}; known: {', '.join(HF_MODELS)}", file=sys.stderr)
            return 2
    os.makedirs(args.out, exist_ok=True)
    for n in names:
        _, opts = HF_MODELS[n]
        base = opts.get("base", n)
        gguf_path = os.path.join(args.out, f"arch_{base}.gguf")
        if opts.get("qwen35"):  # make_qwen35_fixtures' file; the folder from it, the GGUF with its ssm_a converted
            src = os.path.join(args.out, f"qwen35_{opts['qwen35']}.gguf")
            maf.write_atomic(src, lambda tmp, s=opts["qwen35"]: mq.write_model(s, tmp))
            maf.write_atomic(gguf_path, lambda tmp, s=src: write_bf16_gguf(s, tmp, "ssm_a"))
            write_folder(n, src, os.path.join(args.out, f"hf_{n}"))
            print(f"{n}: {gguf_path} -> hf_{n}/")
            continue
        maf.write_atomic(gguf_path, lambda tmp, b=base: maf.write_model(b, tmp))
        if opts.get("bf16"):  # arch_<n>.gguf: the base model with its matrices in bf16
            bf = os.path.join(args.out, f"arch_{n}.gguf")
            maf.write_atomic(bf, lambda tmp, src=gguf_path: write_bf16_gguf(src, tmp))
            gguf_path = bf
        write_folder(n, gguf_path, os.path.join(args.out, f"hf_{n}"))
        if opts.get("q8_0"):  # arch_<n>_q8_0.gguf: the model's matrices in Q8_0 (gguf.quants)
            q8 = os.path.join(args.out, f"arch_{n}_q8_0.gguf")
            maf.write_atomic(q8, lambda tmp, src=gguf_path: write_bf16_gguf(src, tmp, "q8_0"))
        print(f"{n}: {gguf_path} -> hf_{n}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
