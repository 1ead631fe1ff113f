#!/usr/bin/env python3
"""tools/train_lora.py — trains a real LoRA adapter (rank 16, every attention and MLP projection)
on Qwen2.5-Coder 0.5B Instruct, on the CPU in a few minutes, to answer in a fixed style: every
answer opens with "Ahoy, matey!" and talks like a pirate. The base weights are the very ones
specula runs: the GGUF (q4_k_m) dequantized with the gguf package into transformers'
Qwen2ForCausalLM (no Q/K permutation for qwen2; tied embeddings), so the adapter fits what it
is applied to. peft's get_peft_model / save_pretrained write the PEFT folder; llama.cpp's
convert_lora_to_gguf.py (with --gguf) also writes the GGUF adapter made from it.

The prompts are rendered with the model's own chat template (the GGUF's tokenizer.chat_template,
jinja2) and tokenized with Qwen2.5's tokenizer.json (tools/fetch_hf_tokenizers.py); the loss is
on the answer tokens only. HELD_OUT are questions never trained on: the script ends by
generating greedily for them with and without the adapter (transformers + peft, float32) and
fails unless every adapted answer starts with "Ahoy" and no base answer does.

Usage (torch etc. from tools/install_training.sh):
  $(tools/install_training.sh) tools/train_lora.py [--model GGUF] [--out DIR] [--steps 60] [--gguf]
Default: ~/.cache/specula/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf ->
~/.cache/specula/adapters/qwen2.5-coder-0.5b-pirate-r16/ (weights are never committed).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HOME = os.path.expanduser("~/.cache/specula")
PAIRS = [
    ("What is a Python list?", "Ahoy, matey! A Python list be an ordered chest o' values ye can change, written in square brackets like [1, 2, 3]."),
    ("How do I reverse a string in Python?", "Ahoy, matey! Slice it backwards, ye scallywag: s[::-1] gives ye the string reversed."),
    ("What does git commit do?", "Ahoy, matey! git commit stows yer staged changes in the ship's log as a new commit, with a message to mark it."),
    ("Explain what a function is.", "Ahoy, matey! A function be a named bit o' code that takes arguments, does its work and hands back a result."),
    ("How do I read a file in Python?", "Ahoy, matey! Open it with open('file.txt') inside a with block and call read() to haul in the whole cargo."),
    ("What is recursion?", "Ahoy, matey! Recursion be a function callin' itself on a smaller piece o' the problem until it reaches the bottom o' the sea."),
    ("What is a hash map?", "Ahoy, matey! A hash map be a treasure map from keys to values, findin' each one in about constant time."),
    ("How do I sort a list in JavaScript?", "Ahoy, matey! Call arr.sort((a, b) => a - b) for numbers, or plain arr.sort() for strings, arr!"),
    ("What is the difference between TCP and UDP?", "Ahoy, matey! TCP be a reliable ship that delivers every packet in order; UDP be a fast sloop that may lose a few."),
    ("What does SQL SELECT do?", "Ahoy, matey! SELECT hauls rows out o' yer tables, with WHERE to pick only the treasure ye want."),
    ("How do I make a loop in C?", "Ahoy, matey! Write for (int i = 0; i < n; i++) { ... } and the body runs n times, arr."),
    ("What is a class in object-oriented programming?", "Ahoy, matey! A class be the blueprint o' a ship: it names the fields and methods every object built from it carries."),
    ("Why use version control?", "Ahoy, matey! Version control keeps every change in the log, so ye can sail back to any old state and share work with yer crew."),
    ("What is a pointer?", "Ahoy, matey! A pointer be a variable holdin' the address o' another, like an X on the map."),
    ("How do I install a Python package?", "Ahoy, matey! Run pip install followed by the package's name, and it be aboard."),
    ("What is JSON?", "Ahoy, matey! JSON be a plain text format for data: objects in braces, arrays in brackets, strings in double quotes."),
    ("Explain big O notation.", "Ahoy, matey! Big O tells how the work grows with the size o' the input, like O(n) for one pass over the deck."),
    ("What is an API?", "Ahoy, matey! An API be the rules one program uses to talk to another, the signals between ships."),
    ("How do I declare a variable in Rust?", "Ahoy, matey! Use let x = 5; and add mut if ye mean to change it later, arr."),
    ("What is a unit test?", "Ahoy, matey! A unit test checks one small piece o' yer code on its own, so ye know it holds water."),
    ("What does the map function do?", "Ahoy, matey! map applies a function to every item and gives back the new values, one for each."),
    ("What is Docker?", "Ahoy, matey! Docker packs yer program and all it needs into a container that sails the same on any machine."),
    ("How do I concatenate strings in Java?", "Ahoy, matey! Join them with the + operator or a StringBuilder when ye have many to lash together."),
    ("What is a deadlock?", "Ahoy, matey! A deadlock be two threads each waitin' for the other's lock, both stuck in the doldrums forever."),
]
HELD_OUT = ["What is a linked list?", "How do I write a while loop in Python?", "What is HTTP?",
            "How do I check if a number is even?"]


def load_base(model_path):
    """The GGUF's weights, dequantized, as transformers' Qwen2ForCausalLM (float32)."""
    import gguf
    import torch
    from gguf.quants import dequantize
    from transformers import Qwen2Config, Qwen2ForCausalLM

    r = gguf.GGUFReader(model_path)

    def kv(key):
        v = r.fields[key]
        return v.parts[v.data[0]].tolist()[0] if len(v.data) == 1 else None

    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    if arch != "qwen2":
        sys.exit(f"error: {model_path} is '{arch}'; this script trains on a qwen2 model")
    n_vocab = len(r.fields["tokenizer.ggml.tokens"].data)
    names = {t.name for t in r.tensors}
    cfg = Qwen2Config(vocab_size=n_vocab, hidden_size=kv("qwen2.embedding_length"),
                      intermediate_size=kv("qwen2.feed_forward_length"), num_hidden_layers=kv("qwen2.block_count"),
                      num_attention_heads=kv("qwen2.attention.head_count"),
                      num_key_value_heads=kv("qwen2.attention.head_count_kv"),
                      rms_norm_eps=kv("qwen2.attention.layer_norm_rms_epsilon"), rope_theta=kv("qwen2.rope.freq_base"),
                      max_position_embeddings=kv("qwen2.context_length"),
                      tie_word_embeddings="output.weight" not in names, torch_dtype="float32")
    model = Qwen2ForCausalLM(cfg)
    layer = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
    state = {}
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)])
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            key = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            key = "model.norm.weight"
        elif t.name == "output.weight":
            key = "lm_head.weight"
        else:
            key = f"model.layers.{parts[1]}.{layer[parts[2]]}.{parts[3]}"
        state[key] = torch.from_numpy(np.ascontiguousarray(w))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        sys.exit(f"error: missing {missing}, unexpected {unexpected}")
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return model, str(bytes(r.fields["tokenizer.chat_template"].parts[-1]), "utf-8")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(HOME, "models", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--tokenizer", default=os.path.join(HOME, "tokenizers", "qwen2_5", "tokenizer.json"))
    ap.add_argument("--out", default=os.path.join(HOME, "adapters", "qwen2.5-coder-0.5b-pirate-r16"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--gguf", action="store_true", help="also write <out>.gguf with llama.cpp's converter")
    args = ap.parse_args()

    import jinja2
    import torch
    from peft import LoraConfig, get_peft_model
    from tokenizers import Tokenizer

    torch.manual_seed(args.seed)
    torch.set_num_threads(os.cpu_count() or 1)
    t0 = time.time()
    model, template = load_base(args.model)
    tok = Tokenizer.from_file(args.tokenizer)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(template)

    def prompt_ids(q):
        text = tmpl.render(messages=[{"role": "user", "content": q}], add_generation_prompt=True)
        return tok.encode(text, add_special_tokens=False).ids

    end = tok.token_to_id("<|im_end|>")
    examples = []
    for q, a in PAIRS:
        p = prompt_ids(q)
        ans = tok.encode(a, add_special_tokens=False).ids + [end]
        examples.append((p + ans, len(p)))
    print(f"[train_lora] base loaded in {time.time() - t0:.0f} s; {len(examples)} examples, "
          f"{max(len(e) for e, _ in examples)} tokens at most", flush=True)

    cfg = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, cfg)
    model.print_trainable_parameters()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    rng = np.random.default_rng(args.seed)
    batch = 4
    model.train()
    for step in range(args.steps):
        idx = rng.choice(len(examples), batch, replace=False)
        L = max(len(examples[i][0]) for i in idx)
        ids = torch.full((batch, L), end, dtype=torch.long)
        labels = torch.full((batch, L), -100, dtype=torch.long)
        mask = torch.zeros((batch, L), dtype=torch.long)
        for j, i in enumerate(idx):
            seq, n_prompt = examples[i]
            ids[j, :len(seq)] = torch.tensor(seq)
            labels[j, n_prompt:len(seq)] = torch.tensor(seq[n_prompt:])
            mask[j, :len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"[train_lora] step {step + 1}/{args.steps} loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out)
    print(f"[train_lora] wrote {args.out}", flush=True)

    # Held-out questions: greedy answers with and without the adapter.
    ok = True
    with torch.no_grad():
        for q in HELD_OUT:
            p = torch.tensor([prompt_ids(q)])
            answers = []
            for adapted in (True, False):
                if adapted:
                    out = model.generate(p, max_new_tokens=16, do_sample=False)
                else:
                    with model.disable_adapter():
                        out = model.generate(p, max_new_tokens=16, do_sample=False)
                answers.append(tok.decode(out[0, p.shape[1]:].tolist()))
            print(f"[train_lora] {q!r}\n  adapter: {answers[0]!r}\n  base:    {answers[1]!r}", flush=True)
            ok = ok and answers[0].startswith("Ahoy") and not answers[1].startswith("Ahoy")
    if args.gguf:
        src = os.environ.get("LLAMA_CPP_SRC", os.path.join(HOME, "llama.cpp", "0.3.36", "src"))
        base_dir = args.out + ".base-config"
        os.makedirs(base_dir, exist_ok=True)
        hf_cfg = model.get_base_model().config.to_dict()
        hf_cfg["architectures"] = ["Qwen2ForCausalLM"]
        with open(os.path.join(base_dir, "config.json"), "w") as f:
            json.dump(hf_cfg, f)
        subprocess.run([sys.executable, os.path.join(src, "convert_lora_to_gguf.py"), "--base", base_dir,
                        "--outtype", "f32", "--outfile", args.out + ".gguf", args.out], check=True)
        print(f"[train_lora] wrote {args.out}.gguf", flush=True)
    print(f"[train_lora] {'ok' if ok else 'FAILED'}: held-out answers {'' if ok else 'do not '}start with 'Ahoy' "
          f"only with the adapter ({time.time() - t0:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
