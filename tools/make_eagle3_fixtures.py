#!/usr/bin/env python3
"""tools/make_eagle3_fixtures.py — tiny random EAGLE-3 draft heads in llama.cpp's `eagle3` GGUF
layout for two tiny random targets (tools/make_arch_fixtures.py's llama_b and qwen3_a), and a
float64 numpy reference of the heads' drafts as the oracle (tests/fixtures/eagle3_reference.json).

The head file is what llama.cpp's converter writes (convert_hf_to_gguf.py HEAD --target-model-dir
TARGET; conversion/llama.py and src/models/eagle3.cpp of the llama.cpp that llama-cpp-python
0.3.36 vendors): general.architecture "eagle3", the llama keys under `eagle3.`, eagle3.target_layers
(3 llama.cpp "layer input" ids: L = the residual stream entering target layer L, L = n_layers the
final state before the output norm), eagle3.target_hidden_size, the optional bools
eagle3.norm_before_residual / eagle3.norm_before_fc, the target's vocabulary, and the tensors fc,
enc.output_norm (norm_before_fc), blk.0.{attn_norm, attn_norm_2, attn_q/k/v/output, ffn_norm,
ffn_gate/up/down}, output_norm, and optionally output (with d2t, I64 absolute target ids) and
token_embd. The heads differ: HEADS below says what each exercises.

The reference (independent of specula; numpy float64): the target's forward with its layer inputs
(tools/arch_f64_reference.py), g_p = fc(concat(taps_p)), the head's pairs (x_{p+1}, g_p) at position
p, and at each context length n the greedy chain of DEPTH drafts: the pair (x_{n-1}, g_{n-2}) gives
draft 1, then (d_j, y_j) at the next position, y the layer's pre-norm output (llama.cpp's
common_speculative_impl_draft_eagle3). Each draft is recorded with its top-2 logit margin.

Usage:
  python3 tools/make_eagle3_fixtures.py --models-only --out DIR
      writes DIR/arch_<target>.gguf, DIR/eagle3_<head>.gguf, each head as a Hugging Face
      folder DIR/hf_eagle3_<head>/ (config.json + model.safetensors), and the broken heads
      DIR/eagle3_bad_<what>.gguf (BAD) (numpy + gguf only; the tests run this at test time —
      weights are never committed); fails when a head or target differs from the files the
      fixture was made from (sha256);
  python3 tools/make_eagle3_fixtures.py
      also writes tests/fixtures/eagle3_reference.json (per head: its target, the files' sha256,
      and per prompt the prompt, the f64 target's greedy continuation, and the drafts at every
      context length);
  python3 tools/make_eagle3_fixtures.py --llama-cpp
      adds to the fixture, for each head whose taps are all layer inputs (llama.cpp's llama graph
      gives no final state to tap), llama.cpp's own greedy draft-eagle3 run on each prompt
      (tools/llama_spec_oracle.cpp, built against tools/build_llama_server.sh's llama.cpp): every
      draft it made, the context length it continued and the accepted count ("llama_cpp").
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import arch_f64_reference as ref  # noqa: E402
import make_arch_fixtures as arch  # noqa: E402
from llama_oracle import run_spec_oracle, sha256, spec_oracle_binary, write_atomic  # noqa: E402

FIXTURE = os.path.join(HERE, "..", "tests", "fixtures", "eagle3_reference.json")
DEPTH = 4
N_GEN = 16
PROMPT_LENGTHS = (5, 11)

# Each head: its target (a make_arch_fixtures model), seed, geometry (E must be the target's
# n_embd unless the head has its own token_embd), target_layers, flags, and what it exercises.
HEADS = {
    "llama_b_head": dict(target="llama_b", seed=5101, H=4, Hkv=2, F=192, layers=[1, 3, 5], Vd=200,
                         own_embd=False, nbr=False, nbf=False, dt=np.float16,
                         shape="llama_b target (n_embd 96, 5 layers): taps [1, 3, 5] (5 = the final pre-norm "
                               "state), own output over a 200-token draft vocabulary with d2t, the target's "
                               "token embedding, 4 heads / 2 kv heads of 24, n_ff 192, f16"),
    "qwen3_a_head": dict(target="qwen3_a", seed=5201, H=2, Hkv=1, F=96, layers=[0, 2, 3], Vd=None,
                         own_embd=True, nbr=True, nbf=True, dt=np.float32,
                         shape="qwen3_a target (n_embd 64, 4 layers, tied): taps [0, 2, 3] (0 = the embedding), "
                               "no output (the target's projection) and no d2t, its own token_embd, "
                               "norm_before_residual and norm_before_fc, 2 heads / 1 kv head of 32, n_ff 96, f32"),
}


# Broken variants of llama_b_head for the bad-input tests: what each breaks.
BAD = {
    "no_d2t": "an output over 200 draft tokens without the d2t map",
    "vocab": "a vocabulary of 299 tokens (the target has 300)",
    "layers": "target_layers [1, 3, 9] (the target has 5 layers)",
    "d2t_range": "a d2t id of 300 (outside the target vocabulary)",
    "narrow": "n_embd 64 for the 96-wide target, its own token_embd, and no output (the target's would read 96)",
    "extra": "an attn_q.bias, which llama.cpp's eagle3 graph has no place for",
}


def write_head(name: str, path: str, bad: str = ""):
    import gguf

    s = HEADS[name]
    t = arch.SHAPES[s["target"]]
    rng = np.random.default_rng(s["seed"])
    E, Et, V = (64 if bad == "narrow" else t["E"]), t["E"], t["V"]
    H, Hkv, F = s["H"], s["Hkv"], s["F"]
    hd = E // H
    w = gguf.GGUFWriter(path, "eagle3")
    w.add_string("general.name", f"specula eagle3 fixture {s['seed']} (random weights)")
    a = "eagle3."
    w.add_uint32(a + "context_length", 4096)
    w.add_uint32(a + "embedding_length", E)
    w.add_uint32(a + "block_count", 1)
    w.add_uint32(a + "feed_forward_length", F)
    w.add_uint32(a + "attention.head_count", H)
    w.add_uint32(a + "attention.head_count_kv", Hkv)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(a + "rope.freq_base", 10000.0)
    w.add_uint32(a + "rope.dimension_count", hd)
    w.add_uint32(a + "vocab_size", V)
    w.add_array(a + "target_layers", [1, 3, 9] if bad == "layers" else s["layers"])
    w.add_uint32(a + "target_hidden_size", Et)
    w.add_bool(a + "norm_before_residual", s["nbr"])
    w.add_bool(a + "norm_before_fc", s["nbf"])
    # The target's vocabulary, as the converter copies it (ids are fed directly here).
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    Vh = V - 1 if bad == "vocab" else V
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(Vh)])
    w.add_array("tokenizer.ggml.token_type", [1] * Vh)
    w.add_array("tokenizer.ggml.merges", ["t o"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 0)
    w.add_uint32("tokenizer.ggml.eos_token_id", 1)

    def mat(rows, cols, gain=1.0):  # numpy [rows, cols] = GGUF ne [cols, rows]
        return (rng.standard_normal((rows, cols)) * (gain / np.sqrt(cols))).astype(s["dt"])

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("fc.weight", mat(E, 3 * Et))
    if s["nbf"]:
        w.add_tensor("enc.output_norm.weight", norm(3 * Et))
    w.add_tensor("blk.0.attn_norm.weight", norm(E))
    w.add_tensor("blk.0.attn_norm_2.weight", norm(E))
    w.add_tensor("blk.0.attn_q.weight", mat(H * hd, 2 * E))
    w.add_tensor("blk.0.attn_k.weight", mat(Hkv * hd, 2 * E))
    w.add_tensor("blk.0.attn_v.weight", mat(Hkv * hd, 2 * E))
    w.add_tensor("blk.0.attn_output.weight", mat(E, H * hd))
    w.add_tensor("blk.0.ffn_norm.weight", norm(E))
    w.add_tensor("blk.0.ffn_gate.weight", mat(F, E))
    w.add_tensor("blk.0.ffn_up.weight", mat(F, E))
    w.add_tensor("blk.0.ffn_down.weight", mat(E, F))
    w.add_tensor("output_norm.weight", norm(E))
    if bad == "extra":
        w.add_tensor("blk.0.attn_q.bias", np.zeros(H * hd, dtype=np.float32))
    if s["own_embd"] or bad == "narrow":
        w.add_tensor("token_embd.weight", (rng.standard_normal((V, E)) * 0.5).astype(s["dt"]))
    if s["Vd"] is not None and bad != "narrow":
        w.add_tensor("output.weight", mat(s["Vd"], E, 2.0))
        d2t = np.sort(rng.choice(V, s["Vd"], replace=False)).astype(np.int64)
        if bad == "d2t_range":
            d2t[-1] = V
        if bad != "no_d2t":
            w.add_tensor("d2t", d2t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


class Head:
    """The head's tensors in float64 (numpy [rows, cols] = GGUF [cols, rows])."""

    def __init__(self, path):
        from gguf import GGUFReader
        from gguf.quants import dequantize

        r = GGUFReader(path)
        self.kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
        self.t = {}
        for x in r.tensors:
            if x.name == "d2t":
                self.t[x.name] = np.array(x.data, dtype=np.int64)
                continue
            a = dequantize(x.data, x.tensor_type).astype(np.float64)
            self.t[x.name] = a.reshape([int(d) for d in reversed(x.shape.tolist())])

    def key(self, k, default=None):
        return self.kv.get("eagle3." + k, default)


def encode(h: Head, taps):
    x = np.concatenate(taps, -1)  # [T, 3 Et], in target_layers order
    if h.key("norm_before_fc", False):
        x = ref.rms(x, h.t["enc.output_norm.weight"], h.key("attention.layer_norm_rms_epsilon"))
    return x @ h.t["fc.weight"].T


class HeadRun:
    """The head's single layer with a K/V list (positions 0, 1, ...)."""

    def __init__(self, h: Head, target: ref.Model):
        self.h, self.t = h, h.t
        self.eps = float(h.key("attention.layer_norm_rms_epsilon"))
        self.H, self.Hkv = h.key("attention.head_count"), h.key("attention.head_count_kv")
        self.E = h.key("embedding_length")
        self.hd = self.E // self.H
        self.embd = h.t.get("token_embd.weight", target.t["token_embd.weight"])
        out = h.t.get("output.weight")
        if out is None:  # the target's projection (tied: its embedding)
            out = target.t["output.weight"] if target.has("output.weight") else target.t["token_embd.weight"]
        self.out = out
        self.d2t = h.t.get("d2t")
        self.V = target.n_vocab
        self.k, self.v = [], []

    def step(self, ids, g, pos0):
        """Appends pairs (ids[i], g[i]) at positions pos0 + i; returns the pre-norm outputs [n, E]."""
        t, eps, E = self.t, self.eps, self.E
        n = len(ids)
        pos = np.arange(pos0, pos0 + n, dtype=np.float64)
        en = ref.rms(self.embd[np.asarray(ids)], t["blk.0.attn_norm.weight"], eps)
        gn = ref.rms(g, t["blk.0.attn_norm_2.weight"], eps)
        cat = np.concatenate([en, gn], -1)
        q = (cat @ t["blk.0.attn_q.weight"].T).reshape(n, self.H, self.hd)
        k = (cat @ t["blk.0.attn_k.weight"].T).reshape(n, self.Hkv, self.hd)
        v = (cat @ t["blk.0.attn_v.weight"].T).reshape(n, self.Hkv, self.hd)
        base = float(self.h.key("rope.freq_base", 10000.0))
        q = ref.rope(q, pos, self.hd, base, 1.0, None, 1.0, neox=False)
        k = ref.rope(k, pos, self.hd, base, 1.0, None, 1.0, neox=False)
        self.k.extend(k)
        self.v.extend(v)
        K, Vv = np.stack(self.k), np.stack(self.v)
        allpos = np.arange(len(self.k), dtype=np.float64)
        rep = self.H // self.Hkv
        s = np.einsum("qhd,khd->hqk", q / np.sqrt(self.hd), np.repeat(K, rep, 1))
        s = np.where((allpos[None, :] <= pos[:, None])[None], s, -np.inf)
        o = np.einsum("hqk,khd->qhd", ref.softmax(s, -1), np.repeat(Vv, rep, 1)).reshape(n, -1)
        o = o @ t["blk.0.attn_output.weight"].T
        res = gn if self.h.key("norm_before_residual", False) else g
        hh = o + res
        x = ref.rms(hh, t["blk.0.ffn_norm.weight"], eps)
        f = (ref.silu(x @ t["blk.0.ffn_gate.weight"].T) * (x @ t["blk.0.ffn_up.weight"].T)) @ t["blk.0.ffn_down.weight"].T
        return hh + f

    def pick(self, y):
        """(target id, top-2 logit margin) of the head's argmax for one pre-norm row."""
        logits = ref.rms(y, self.t["output_norm.weight"], self.eps) @ self.out.T
        order = np.argsort(-logits, kind="stable")
        best = int(order[0])
        margin = float(logits[order[0]] - logits[order[1]])
        return (int(self.d2t[best]) if self.d2t is not None else best), margin


def reference(name: str, target_path: str, head_path: str) -> dict:
    s = HEADS[name]
    m = ref.Model(target_path)
    h = Head(head_path)
    rng = np.random.default_rng(s["seed"] + 1000)
    V = m.n_vocab
    cases = []
    for plen in PROMPT_LENGTHS:
        seq = [int(x) for x in rng.integers(2, V, plen)]
        for _ in range(N_GEN):  # the f64 target's greedy continuation
            seq.append(int(np.argmax(ref.forward(m, seq)[-1])))
        taps = []
        ref.forward(m, seq, taps)
        g = encode(h, [taps[L] for L in s["layers"]])
        run = HeadRun(h, m)
        # Teacher-forced pairs p = 0 .. S-2: (x_{p+1}, g_p) at position p.
        y_tf = run.step(seq[1:], g[:-1], 0)
        k_tf, v_tf = list(run.k), list(run.v)
        points = []
        for n in range(plen, len(seq) + 1):
            # pairs 0 .. n-2; the last one is the boundary (x_{n-1}, g_{n-2}), which drafts
            run.k, run.v = k_tf[:n - 1], v_tf[:n - 1]
            drafts, margins = [], []
            d, mg = run.pick(y_tf[n - 2])
            drafts.append(d)
            margins.append(mg)
            y = y_tf[n - 2]
            for j in range(1, DEPTH):
                y = run.step([d], y[None, :], n - 2 + j)[0]
                d, mg = run.pick(y)
                drafts.append(d)
                margins.append(mg)
            points.append({"n": n, "drafts": drafts, "margins": [round(x, 6) for x in margins]})
        cases.append({"sequence": seq, "prompt_length": plen, "points": points})
    return {"target": s["target"], "shape": s["shape"], "layers": s["layers"], "depth": DEPTH,
            "target_sha256": sha256(target_path), "head_sha256": sha256(head_path), "cases": cases}


def write_hf_folder(name: str, head_path: str, folder: str):
    """The head as a Hugging Face EAGLE-3 folder (LlamaForCausalLMEagle3: config.json +
    model.safetensors), the inverse of llama.cpp's conversion: Q/K rows back in HF's half-split
    RoPE order, d2t as offsets (target id - draft index), a t2d mask, midlayer.* names."""
    from gguf import GGUFReader
    from safetensors.numpy import save_file

    s = HEADS[name]
    t = arch.SHAPES[s["target"]]
    E, V, H, Hkv = t["E"], t["V"], s["H"], s["Hkv"]
    r = GGUFReader(head_path)
    g = {x.name: np.array(x.data).reshape([int(d) for d in reversed(x.shape.tolist())]) for x in r.tensors}

    def unpermute(w, n_head):  # inverse of LlamaModel.permute (conversion/llama.py)
        return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    names = {"fc.weight": "fc.weight", "enc.output_norm.weight": "input_norm.weight",
             "blk.0.attn_norm.weight": "midlayer.input_layernorm.weight",
             "blk.0.attn_norm_2.weight": "midlayer.hidden_norm.weight",
             "blk.0.attn_v.weight": "midlayer.self_attn.v_proj.weight",
             "blk.0.attn_output.weight": "midlayer.self_attn.o_proj.weight",
             "blk.0.ffn_norm.weight": "midlayer.post_attention_layernorm.weight",
             "blk.0.ffn_gate.weight": "midlayer.mlp.gate_proj.weight",
             "blk.0.ffn_up.weight": "midlayer.mlp.up_proj.weight",
             "blk.0.ffn_down.weight": "midlayer.mlp.down_proj.weight",
             "output_norm.weight": "norm.weight", "output.weight": "lm_head.weight",
             "token_embd.weight": "embed_tokens.weight"}
    st = {hfn: np.ascontiguousarray(g[gn]) for gn, hfn in names.items() if gn in g}
    st["midlayer.self_attn.q_proj.weight"] = np.ascontiguousarray(unpermute(g["blk.0.attn_q.weight"], H))
    st["midlayer.self_attn.k_proj.weight"] = np.ascontiguousarray(unpermute(g["blk.0.attn_k.weight"], Hkv))
    if "d2t" in g:
        d2t = g["d2t"].astype(np.int64)
        st["d2t"] = d2t - np.arange(d2t.size, dtype=np.int64)
        t2d = np.zeros(V, dtype=bool)
        t2d[d2t] = True
        st["t2d"] = t2d
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": E,
              "intermediate_size": s["F"], "num_attention_heads": H, "num_key_value_heads": Hkv,
              "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 4096,
              "vocab_size": V, "draft_vocab_size": s["Vd"] or V, "target_hidden_size": t["E"],
              "eagle_aux_hidden_state_layer_ids": s["layers"], "norm_before_residual": s["nbr"],
              "norm_before_fc": s["nbf"], "tie_word_embeddings": "lm_head.weight" not in st}
    os.makedirs(folder, exist_ok=True)
    save_file(st, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def write_models(out: str) -> dict:
    paths = {}
    for name, s in HEADS.items():
        tp = os.path.join(out, f"arch_{s['target']}.gguf")
        if not os.path.exists(tp):
            write_atomic(tp, lambda tmp, n=s["target"]: arch.write_model(n, tmp))
        hp = os.path.join(out, f"eagle3_{name}.gguf")
        write_atomic(hp, lambda tmp, n=name: write_head(n, tmp))
        write_hf_folder(name, hp, os.path.join(out, f"hf_eagle3_{name}"))
        paths[name] = (tp, hp)
    for bad in BAD:
        write_atomic(os.path.join(out, f"eagle3_bad_{bad}.gguf"), lambda tmp, b=bad: write_head("llama_b_head", tmp, b))
    return paths


def add_llama_cpp(paths: dict) -> int:
    with open(FIXTURE) as f:
        doc = json.load(f)
    binary = spec_oracle_binary()
    for name, (tp, hp) in paths.items():
        h = doc["heads"].get(name)
        if h is None or max(h["layers"]) >= arch.SHAPES[h["target"]]["L"]:
            continue
        runs = []
        for c in h["cases"]:
            plen = c["prompt_length"]
            runs.append(run_spec_oracle(binary, c["sequence"][:plen], len(c["sequence"]) - plen, h["depth"],
                                        ["-m", tp, "--spec-type", "draft-eagle3", "-md", hp]))
        h["llama_cpp"] = runs
        print(f"{name}: {sum(len(d['draft']) for r in runs for d in r['drafts'])} llama.cpp drafts")
    doc["oracle_llama_cpp"] = ("llama.cpp (llama-cpp-python 0.3.36 sdist) common_speculative draft-eagle3 via "
                               "tools/llama_spec_oracle.cpp, greedy, f16 KV cache, CPU")
    with open(FIXTURE, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {FIXTURE} ({os.path.getsize(FIXTURE)} bytes)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-only", action="store_true", help="write the GGUF files only")
    ap.add_argument("--out", help="folder for the GGUF files (default: a temporary folder)")
    ap.add_argument("--llama-cpp", action="store_true", help="add llama.cpp's draft-eagle3 runs to the fixture")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="specula_eagle3_")
    os.makedirs(out, exist_ok=True)
    paths = write_models(out)
    if args.models_only:
        if os.path.exists(FIXTURE):
            with open(FIXTURE) as f:
                heads = json.load(f)["heads"]
            for name, (tp, hp) in paths.items():
                if name in heads and (heads[name]["target_sha256"] != sha256(tp) or heads[name]["head_sha256"] != sha256(hp)):
                    print(f"error: {name}: the files differ from the ones the fixture was made from", file=sys.stderr)
                    return 1
        return 0
    if args.llama_cpp:
        return add_llama_cpp(paths)
    heads = {}
    for name, (tp, hp) in paths.items():
        heads[name] = reference(name, tp, hp)
        distinct = len({d for c in heads[name]["cases"] for p in c["points"] for d in p["drafts"]})
        print(f"{name}: {distinct} distinct draft tokens")
    doc = {"format": "eagle3_reference v1: per head its target (tools/make_arch_fixtures.py), the taps, the "
                     "draft depth, both files' sha256 (tools/make_eagle3_fixtures.py --models-only writes them), "
                     "and per prompt: the sequence (prompt + the f64 target's greedy continuation), the prompt "
                     "length, and for each context length n (the first n tokens of the sequence, the last one "
                     "pending) the head's greedy drafts and their top-2 logit margins.",
           "oracle": "numpy float64 (tools/arch_f64_reference.py for the target, this file for the head)",
           "heads": heads}
    with open(FIXTURE, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {FIXTURE} ({os.path.getsize(FIXTURE)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
