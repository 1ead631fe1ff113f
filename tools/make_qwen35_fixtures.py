#!/usr/bin/env python3
"""tools/make_qwen35_fixtures.py — tiny random-weight Qwen3.5 (llama.cpp `qwen35`) GGUF
files, and llama.cpp's outputs on them as the oracle for specula's hybrid model.

No Qwen3.5 weights are reachable here, so the models are written from fixed seeds with the
`gguf` package (tensor names, shapes and metadata keys as llama.cpp's loader reads them:
src/models/qwen35.cpp in the llama.cpp that llama-cpp-python vendors). Two shapes:

  tiny_a  n_embd 64, 4 layers (3 linear-attention + 1 attention, full_attention_interval
          4), 2 heads / 1 kv head of 32, partial rope (16 of 32 dims) with rope sections
          [2, 1, 0, 1] that leave some pairs unrotated, conv kernel 4, 2 k-heads / 4
          v-heads of 16 (heads tiled), vocab 256, f32, output tied to the embedding;
  tiny_b  n_embd 96, 6 layers (a BOOL recurrent_layers list: attention at 2 and 5), 4 heads
          / 2 kv heads of 32 (4*32 != 96), full rope with sections [6, 5, 5, 0], conv
          kernel 3, 1 k-head / 2 v-heads of 32, vocab 300, f16 matrices, an output.weight.

Usage:
  python3 tools/make_qwen35_fixtures.py --models-only --out DIR [--check]
      writes DIR/qwen35_tiny_a.gguf and DIR/qwen35_tiny_b.gguf (numpy + gguf only; the
      tests run this at test time — weights are never committed); --check fails unless
      they are byte for byte the files the committed fixture was made from (sha256);
  python3 tools/make_qwen35_fixtures.py
      also runs llama.cpp (llama-cpp-python, tools/install_reference.sh) on them and writes
      tests/fixtures/qwen35_reference.json: per model its sha256 (the test checks the
      regenerated file is the one llama.cpp judged), and per prompt the prompt ids,
      llama.cpp's 24-token greedy continuation and, at every position of prompt +
      continuation, the argmax, the top 8 ids with logits, and the logits of 16 fixed ids.
llama.cpp runs with its default f16 KV cache (specula's default too).
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

from llama_oracle import check_models, greedy_and_teacher_forced, sha256, write_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "fixtures", "qwen35_reference.json")

SHAPES = {
    "tiny_a": dict(seed=3501, n_embd=64, n_layers=4, interval=4, recurrent=None, n_head=2, n_head_kv=1,
                   head_dim=32, n_rot=16, sections=[2, 1, 0, 1], d_conv=4, d_state=16, n_k_heads=2,
                   n_v_heads=4, n_ff=128, n_vocab=256, tied=True, mat_dtype=np.float32),
    "tiny_b": dict(seed=3502, n_embd=96, n_layers=6, interval=None,
                   recurrent=[True, True, False, True, True, False], n_head=4, n_head_kv=2, head_dim=32,
                   n_rot=32, sections=[6, 5, 5, 0], d_conv=3, d_state=32, n_k_heads=1, n_v_heads=2, n_ff=160,
                   n_vocab=300, tied=False, mat_dtype=np.float16),
}
PROMPT_LENGTHS = [7, 19, 33, 48]
N_GEN = 24


def write_model(name: str, path: str, shape: dict | None = None) -> None:
    """Writes SHAPES[name] (or `shape`, same keys) to path. A shape with "mtp" (a dict: own_embed,
    own_head, head_norm, copy_gain) also gets a multi-token-prediction block after the trunk, as
    llama.cpp's converter writes Qwen3.5's (blk.L.nextn.*; tools/make_mtp_fixtures.py)."""
    import gguf

    s = shape or SHAPES[name]
    rng = np.random.default_rng(s["seed"])
    E, L, F, V = s["n_embd"], s["n_layers"], s["n_ff"], s["n_vocab"]
    H, Hkv, hd = s["n_head"], s["n_head_kv"], s["head_dim"]
    ds, Hk, Hv, K = s["d_state"], s["n_k_heads"], s["n_v_heads"], s["d_conv"]
    conv_dim = (2 * Hk + Hv) * ds
    value_dim = Hv * ds
    recurrent = s["recurrent"] or [(i + 1) % s["interval"] != 0 for i in range(L)]

    w = gguf.GGUFWriter(path, "qwen35")
    w.add_string("general.name", f"qwen35 {name} (random weights)")
    a = "qwen35."
    mtp = s.get("mtp")
    for key, val in [("context_length", 4096), ("embedding_length", E), ("block_count", L + (1 if mtp else 0)),
                     ("feed_forward_length", F), ("attention.head_count", H), ("attention.head_count_kv", Hkv),
                     ("attention.key_length", hd), ("attention.value_length", hd), ("rope.dimension_count", s["n_rot"]),
                     ("ssm.conv_kernel", K), ("ssm.inner_size", value_dim), ("ssm.state_size", ds),
                     ("ssm.time_step_rank", Hv), ("ssm.group_count", Hk)]:
        w.add_uint32(a + key, val)
    if s["interval"] is not None:
        w.add_uint32(a + "full_attention_interval", s["interval"])
    else:
        w.add_array(a + "attention.recurrent_layers", [bool(x) for x in recurrent] + ([False] if mtp else []))
    if mtp:
        w.add_uint32(a + "nextn_predict_layers", 1)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(a + "rope.freq_base", 10000.0)
    w.add_array(a + "rope.dimension_sections", [int(x) for x in s["sections"]])
    # A gpt2-style vocabulary (the ids are fed directly; the text is never tokenized).
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(V)])
    w.add_array("tokenizer.ggml.token_type", [1] * V)
    w.add_array("tokenizer.ggml.merges", ["t o"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 0)
    w.add_uint32("tokenizer.ggml.eos_token_id", 1)

    def mat(rows, cols, gain=1.0):  # [rows, cols] -> GGUF ne [cols, rows]
        return (rng.standard_normal((rows, cols)) * gain / np.sqrt(cols)).astype(s["mat_dtype"])

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    # A tied output reads the embedding back: keep it small against what the layers add, or
    # greedy decoding just repeats its input token.
    embd_scale = s.get("embd_scale", 0.3 if s["tied"] else 1.0)
    w.add_tensor("token_embd.weight", (rng.standard_normal((V, E)) * embd_scale).astype(np.float32))
    w.add_tensor("output_norm.weight", norm(E))
    if not s["tied"]:
        w.add_tensor("output.weight", mat(V, E, 2.0))
    for il in range(L):
        b = f"blk.{il}."
        w.add_tensor(b + "attn_norm.weight", norm(E))
        w.add_tensor(b + "post_attention_norm.weight", norm(E))
        if recurrent[il]:
            w.add_tensor(b + "attn_qkv.weight", mat(conv_dim, E))
            w.add_tensor(b + "attn_gate.weight", mat(value_dim, E))
            w.add_tensor(b + "ssm_conv1d.weight", (rng.standard_normal((conv_dim, K)) / np.sqrt(K)).astype(np.float32))
            dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), Hv))  # as the reference init
            w.add_tensor(b + "ssm_dt.bias", (dt + np.log(-np.expm1(-dt))).astype(np.float32))
            w.add_tensor(b + "ssm_a", (-rng.uniform(1.0, 16.0, Hv)).astype(np.float32))  # -exp(A_log)
            w.add_tensor(b + "ssm_beta.weight", mat(Hv, E))
            w.add_tensor(b + "ssm_alpha.weight", mat(Hv, E))
            w.add_tensor(b + "ssm_norm.weight", norm(ds))
            w.add_tensor(b + "ssm_out.weight", mat(E, value_dim))
        else:
            w.add_tensor(b + "attn_q.weight", mat(2 * H * hd, E))
            w.add_tensor(b + "attn_k.weight", mat(Hkv * hd, E))
            w.add_tensor(b + "attn_v.weight", mat(Hkv * hd, E))
            w.add_tensor(b + "attn_output.weight", mat(E, H * hd))
            w.add_tensor(b + "attn_q_norm.weight", norm(hd))
            w.add_tensor(b + "attn_k_norm.weight", norm(hd))
        w.add_tensor(b + "ffn_gate.weight", mat(F, E))
        w.add_tensor(b + "ffn_up.weight", mat(F, E))
        w.add_tensor(b + "ffn_down.weight", mat(E, F))
    if mtp:
        write_mtp_block(w, rng, s, mat, norm)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_mtp_block(w, rng, s, mat, norm) -> None:
    """The MTP block blk.L (llama.cpp's qwen35 graph_mtp reads these): eh_proj [E, 2E] over
    concat(enorm(embd(x)), hnorm(h)), a gated attention decoder block, optional own
    embed_tokens / shared_head_head / shared_head_norm. copy_gain > 0 adds copy_gain * I to
    eh_proj's embedding half, so that the block leans to predicting its input token again
    (drafts a target that repeats tokens accepts: rounds with accepted drafts)."""
    o = s["mtp"]
    E, F, V = s["n_embd"], s["n_ff"], s["n_vocab"]
    H, Hkv, hd = s["n_head"], s["n_head_kv"], s["head_dim"]
    b = f"blk.{s['n_layers']}."
    eh = mat(E, 2 * E).astype(np.float32)
    eh[:, :E] += o.get("copy_gain", 0.0) * np.eye(E, dtype=np.float32)
    w.add_tensor(b + "nextn.eh_proj.weight", eh.astype(s["mat_dtype"]))
    w.add_tensor(b + "nextn.enorm.weight", norm(E))
    w.add_tensor(b + "nextn.hnorm.weight", norm(E))
    w.add_tensor(b + "attn_norm.weight", norm(E))
    w.add_tensor(b + "post_attention_norm.weight", norm(E))
    w.add_tensor(b + "attn_q.weight", mat(2 * H * hd, E))
    w.add_tensor(b + "attn_k.weight", mat(Hkv * hd, E))
    w.add_tensor(b + "attn_v.weight", mat(Hkv * hd, E))
    w.add_tensor(b + "attn_output.weight", mat(E, H * hd, o.get("layer_gain", 1.0)))
    w.add_tensor(b + "attn_q_norm.weight", norm(hd))
    w.add_tensor(b + "attn_k_norm.weight", norm(hd))
    w.add_tensor(b + "ffn_gate.weight", mat(F, E))
    w.add_tensor(b + "ffn_up.weight", mat(F, E))
    w.add_tensor(b + "ffn_down.weight", mat(E, F, o.get("layer_gain", 1.0)))
    if o.get("own_embed"):
        w.add_tensor(b + "nextn.embed_tokens.weight", rng.standard_normal((V, E)).astype(np.float32))
    if o.get("own_head"):
        w.add_tensor(b + "nextn.shared_head_head.weight", mat(V, E, 2.0))
    if o.get("head_norm"):
        w.add_tensor(b + "nextn.shared_head_norm.weight", norm(E))


def prompts(name: str) -> list[list[int]]:
    rng = np.random.default_rng(SHAPES[name]["seed"] + 1000)
    V = SHAPES[name]["n_vocab"]
    return [[int(x) for x in rng.integers(2, V, n)] for n in PROMPT_LENGTHS]


def oracle(name: str, path: str) -> dict:
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=256, logits_all=True, n_threads=2, n_batch=256, verbose=False)
    V = SHAPES[name]["n_vocab"]
    probe = [int(x) for x in np.random.default_rng(7).choice(V, 16, replace=False)]
    cases = greedy_and_teacher_forced(llm, prompts(name), N_GEN, probe, stable_sort=False)
    return {"sha256": sha256(path), "probe_ids": probe, "cases": cases}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-only", action="store_true", help="write the GGUF files only")
    ap.add_argument("--out", help="folder for the GGUF files (default: a temporary folder)")
    ap.add_argument("--check", action="store_true", help="with --models-only: compare with the fixture's sha256")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="specula_qwen35_")
    os.makedirs(out, exist_ok=True)
    paths = {}
    for name in SHAPES:
        paths[name] = os.path.join(out, f"qwen35_{name}.gguf")
        write_atomic(paths[name], lambda tmp, n=name: write_model(n, tmp))
    if args.models_only:
        return check_models(paths, FIXTURE, args.check)
    import llama_cpp

    ref = {"format": "qwen35_reference v1: per model the GGUF's sha256 (tools/make_qwen35_fixtures.py "
                     "regenerates it), probe_ids, and per prompt: prompt ids, llama.cpp's greedy continuation "
                     f"({N_GEN} tokens), and at every position of prompt + continuation the argmax, top 8 ids "
                     "and logits, and the logits of probe_ids (teacher forced).",
           "oracle": f"llama-cpp-python {llama_cpp.__version__} (f16 KV cache, CPU)",
           "models": {name: oracle(name, p) for name, p in paths.items()}}
    with open(FIXTURE, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {FIXTURE} ({os.path.getsize(FIXTURE)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
