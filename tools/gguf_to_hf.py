"""tools/gguf_to_hf.py — a GGUF model written as a Hugging Face folder, for trying and benchmarking
specula's folder path on the real models reachable here (no model hub is): Qwen2.5-Coder and
Gemma 3 GGUFs from `specula pull`.

Every tensor is dequantized with the `gguf` package's reference dequantizers (gguf.quants) and
written in --dtype (bf16 by default, as checkpoints on the Hub are) with the names, Q/K order and
norm convention transformers uses (the inverse of convert_hf_to_gguf.py; tools/make_hf_folders.py
holds the mapping). config.json comes from the GGUF metadata; tokenizer_config.json carries the
chat template and the BOS/EOS texts; generation_config.json the end-of-generation ids.
tokenizer.json: for byte-level BPE vocabularies (tokenizer.ggml.model gpt2 with pre qwen2) it is
built from the GGUF vocabulary (BPE model with the merges, the Qwen2 Split regex + ByteLevel,
NFC, added tokens for control / user-defined tokens) — what Qwen's own tokenizer.json holds;
otherwise pass --tokenizer-json (e.g. the Gemma 3 file from tools/fetch_hf_tokenizers.py).
Shards above --shard-mb go into model-0000N-of-0000M.safetensors with an index.

With --mlx BITS:GROUP the matrices are written MLX affine-quantized instead (mlx-lm's layout,
tools/make_hf_folders.py mlx_quantize) with scales and biases in --dtype.

Usage: python3 tools/gguf_to_hf.py MODEL.gguf OUT_DIR [--dtype bf16|f16|f32] [--tokenizer-json FILE]
       [--shard-mb 2000] [--mlx 4:64]
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_folders as mhf  # noqa: E402

HF_ARCH = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM",
           "gemma3": "Gemma3ForCausalLM", "gemma2": "Gemma2ForCausalLM", "phi3": "Phi3ForCausalLM",
           "qwen3moe": "Qwen3MoeForCausalLM", "smollm3": "SmolLM3ForCausalLM", "ernie4_5": "Ernie4_5ForCausalLM",
           "qwen35": "Qwen3_5ForCausalLM"}

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


def read(path):
    import gguf
    from gguf import quants

    r = gguf.GGUFReader(path)
    kv, vocab = {}, {}
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        vals = [f.parts[i] for i in f.data]
        t = f.types[0]
        if t == gguf.GGUFValueType.STRING:
            v = bytes(vals[0]).decode()
        elif t == gguf.GGUFValueType.ARRAY:
            v = [bytes(x).decode() if f.types[1] == gguf.GGUFValueType.STRING else x.tolist()[0] for x in vals]
        else:
            v = vals[0].tolist()[0]
        (vocab if f.name.startswith("tokenizer.") else kv)[f.name] = v
    tensors = {}
    for t in r.tensors:
        data = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        tensors[t.name] = (data.reshape([int(x) for x in reversed(t.shape.tolist())]), t.tensor_type)
    return kv, vocab, tensors


def tokenizer_json(vocab):
    if vocab.get("tokenizer.ggml.model") != "gpt2" or vocab.get("tokenizer.ggml.pre") != "qwen2":
        raise SystemExit("tokenizer.json can be built only for gpt2/qwen2 vocabularies; pass --tokenizer-json")
    tokens, types = vocab["tokenizer.ggml.tokens"], vocab["tokenizer.ggml.token_type"]
    model_vocab = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 1}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": ty == 3} for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (3, 4)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": model_vocab, "merges": vocab["tokenizer.ggml.merges"]},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--tokenizer-json")
    ap.add_argument("--shard-mb", type=int, default=2000)
    ap.add_argument("--mlx", metavar="BITS:GROUP", help="write MLX affine-quantized weights (mlx-lm layout), e.g. 4:64")
    args = ap.parse_args()
    from safetensors.numpy import save_file

    kv, vocab, tensors = read(args.gguf)
    arch = kv["general.architecture"]
    if arch not in HF_ARCH:
        raise SystemExit(f"architecture {arch} has no Hugging Face mapping here")
    hf_arch = HF_ARCH[arch]
    cfg = mhf.hf_config(hf_arch, kv, tensors, mhf.LLAMA3_ROPE)
    cfg["torch_dtype"] = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[args.dtype]
    out = mhf.hf_tensors(hf_arch, kv, tensors)
    tmp = args.out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    arrays = {}
    for k, v in out.items():
        v = np.ascontiguousarray(v, dtype=np.float32)
        if v.ndim >= 2 and args.dtype == "bf16":
            arrays[k] = mhf.to_bf16_bits(v)
        elif v.ndim >= 2 and args.dtype == "f16":
            arrays[k] = v.astype(np.float16)
        else:
            arrays[k] = v
    shards = []
    if args.mlx:
        bits, group = (int(x) for x in args.mlx.split(":"))
        mhf.write_mlx(out, cfg, dict(bits=bits, group_size=group, dtype=args.dtype if args.dtype != "f32" else "f16"), tmp)
        arrays = {}
    else:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
    # shards of at most --shard-mb (by name order)
    cur, size = {}, 0
    for k in sorted(arrays):
        if cur and size + arrays[k].nbytes > args.shard_mb << 20:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = arrays[k]
        size += arrays[k].nbytes
    if cur:
        shards.append(cur)
    weight_map = {}
    for i, part in enumerate(shards):
        name = "model.safetensors" if len(shards) == 1 else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        path = os.path.join(tmp, name)
        save_file(part, path, metadata={"format": "pt"})
        bf = [k for k, v in part.items() if v.dtype == np.uint16]
        if bf:
            mhf.retag_bf16(path, set(bf))
        weight_map.update({k: name for k in part})
    if len(shards) > 1:
        with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": sum(v.nbytes for v in arrays.values())}, "weight_map": weight_map},
                      f, indent=1)
    if args.tokenizer_json:
        shutil.copy(args.tokenizer_json, os.path.join(tmp, "tokenizer.json"))
    else:
        with open(os.path.join(tmp, "tokenizer.json"), "w") as f:
            json.dump(tokenizer_json(vocab), f, ensure_ascii=False)
    tokens = vocab.get("tokenizer.ggml.tokens", [])
    text = lambda key: tokens[vocab[key]] if key in vocab and vocab[key] < len(tokens) else None  # noqa: E731
    tc = {"add_bos_token": bool(vocab.get("tokenizer.ggml.add_bos_token", False)),
          "bos_token": text("tokenizer.ggml.bos_token_id"), "eos_token": text("tokenizer.ggml.eos_token_id"),
          "pad_token": text("tokenizer.ggml.padding_token_id")}
    if "tokenizer.chat_template" in vocab:
        tc["chat_template"] = vocab["tokenizer.chat_template"]
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=1, ensure_ascii=False)
    eos = [vocab[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id") if k in vocab]
    if "tokenizer.ggml.padding_token_id" in vocab and arch == "qwen2":
        eos.append(vocab["tokenizer.ggml.padding_token_id"])  # <|endoftext|>, as Qwen's generation_config
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": sorted(set(eos))}, f, indent=1)
    shutil.rmtree(args.out, ignore_errors=True)
    os.replace(tmp, args.out)
    print(f"{args.gguf} -> {args.out}: {len(arrays)} tensors in {len(shards)} file(s), {args.dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
