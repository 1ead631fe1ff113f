#!/usr/bin/env python3
"""tools/make_reasoning_model.py — a tiny random-weight qwen3 GGUF with Qwen3's vocabulary
layout, for the mechanics of reasoning models (tests/integration/test_reasoning.py).

Qwen3's tokenizer is Qwen2.5's with four more added tokens where Qwen2.5 has padding:
<tool_response> 151665, </tool_response> 151666, <think> 151667, </think> 151668 (user-defined
tokens: text, not control tokens, as convert_hf_to_gguf.py marks added tokens whose
"special" is false). So the vocabulary here is copied from the Qwen2.5-Coder 0.5B GGUF
(tokens, types, merges, BOS/EOS) with those four entries set, and the chat template is a
Qwen3-style one: the model writes "<think>" itself; enable_thinking false writes an empty
block "<think>\\n\\n</think>\\n\\n". On this vocabulary "<think>" and "</think>" are one token
each — the path the Qwen2.5 test with a text tag does not take.

The weights are random (the qwen3 architecture's tensors as tools/make_arch_fixtures.py
writes them, n_embd 64, 2 layers, f16 tied embeddings); the model's output is noise, which
is all the mechanics need (a thinking budget forces "</think>"; the split and the counts are
checked against the raw text of the same request). No oracle output: the architecture is
judged by llama.cpp in tests/fixtures/arch_reference.json.

Usage: python3 tools/make_reasoning_model.py QWEN25_GGUF OUT_GGUF
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_arch_fixtures as maf  # noqa: E402

ADDED = {151665: "<tool_response>", 151666: "</tool_response>", 151667: "<think>", 151668: "</think>"}
USER_DEFINED = 4

TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def read_vocab(path):
    import gguf

    r = gguf.GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def ints(key):
        f = r.fields[key]
        return [int(f.parts[i][0]) for i in f.data]

    tokens, types, merges = strings("tokenizer.ggml.tokens"), ints("tokenizer.ggml.token_type"), strings("tokenizer.ggml.merges")
    for i, t in ADDED.items():
        if not tokens[i].startswith("[PAD"):
            raise SystemExit(f"{path}: id {i} is {tokens[i]!r}, not padding: not Qwen2.5's vocabulary")
        tokens[i], types[i] = t, USER_DEFINED
    return tokens, types, merges, ints("tokenizer.ggml.eos_token_id")[0]


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    tokens, types, merges, eos = read_vocab(src)
    maf.SHAPES["qwen3_reasoning"] = dict(arch="qwen3", seed=4299, E=64, L=2, H=4, Hkv=2, hd=16, F=128, V=len(tokens),
                                         tied=True, dt=np.float16, embd=0.5, base=1000000.0, shape="")
    b = maf.Builder("qwen3_reasoning", out + ".tmp")

    def vocab():
        b.w.add_string("tokenizer.ggml.model", "gpt2")
        b.w.add_string("tokenizer.ggml.pre", "qwen2")
        b.w.add_array("tokenizer.ggml.tokens", tokens)
        b.w.add_array("tokenizer.ggml.token_type", types)
        b.w.add_array("tokenizer.ggml.merges", merges)
        b.w.add_uint32("tokenizer.ggml.bos_token_id", eos)
        b.w.add_uint32("tokenizer.ggml.eos_token_id", eos)
        b.w.add_bool("tokenizer.ggml.add_bos_token", False)
        b.w.add_string("tokenizer.chat_template", TEMPLATE)

    b.vocab = vocab
    maf.write_llama_like(b)
    b.finish()
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
