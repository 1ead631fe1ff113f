#!/usr/bin/env python3
"""tools/train_eagle3.py — distils an EAGLE-3 draft head for a Qwen2 / Qwen2.5 GGUF target (e.g.
Qwen2.5-Coder 0.5B or 1.5B, `specula pull`) from the target's own hidden states, on the CPU, and
writes it in llama.cpp's `eagle3` GGUF layout (decoding/eagle3.h; `--spec eagle3 --draft-model`).

No dataset can be downloaded here, so the data is the target's own greedy answers (self-
distillation, as Medusa/EAGLE recommend when the training data is not the target's): prompts built
from the Python standard library's source files on this machine (repeat / edit / explain / extend a
file) and prose requests (stories, explanations, letters, descriptions over a list of subjects),
answered by the target through `specula serve` (the build's binary, greedy, up to --answer-tokens).
The target's hidden states come from this file's own float32 torch forward of the GGUF weights
(dequantized with the gguf package): the inputs of layers 2, N/2 and N-3 (llama.cpp's and Hugging
Face's hidden_states convention, eagle3.target_layers). As the answers are greedy, each answer
token is the target's argmax after the tokens before it: the head learns those (prompt positions
are context, not loss).

The head (EAGLE-3: Li et al. 2025): g_p = fc(concat(taps_p)); one decoder layer over
concat(RMSNorm(embd(x_{p+1})), RMSNorm(g_p)) with residual g_p; output over a draft vocabulary (the
--draft-vocab most frequent answer tokens; d2t maps it to target ids; its rows start as the
target's output rows). Training-time test (the paper's section 3.3): each position is unrolled
--ttt steps, step j feeding the target's token and the head's own pre-norm output of step j-1
at position p + j, attending to the teacher-forced pairs 0..p and its own earlier steps; loss
sum_j 0.8^j CE(step j's logits, the target's token at p + j + 2).

usage: tools/train_eagle3.py --target MODEL.gguf --out HEAD.gguf [--minutes 45] [--data-tokens 120000]
         [--answer-tokens 384] [--draft-vocab 16384] [--ttt 3] [--specula build/release/specula]
Needs the training venv (tools/install_training.sh: torch, numpy, gguf); run it with that python.
Progress goes to stderr; the data (token ids) is kept in --work (default /tmp/specula_eagle3_train)
and reused when present. --holdout (default 10%) of the answers never train: every 100 steps their
step-0 accuracy is measured and the best head seen is the one written (the first run overfit: 0.9
training accuracy, 23-32% accepted; docs/BENCHMARKS.md).
"""
import argparse
import glob
import json
import math
import os
import random
import subprocess
import sys
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def log(*a):
    print("[train_eagle3]", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# 1. Prompts and the target's answers.

SUBJECTS = ["a lighthouse keeper", "a retired astronaut", "a street market at dawn", "the immune system", "volcanoes",
            "a chess tournament", "the history of bread", "a night train across Europe", "honeybees", "a lost dog",
            "photosynthesis", "a jazz musician", "the printing press", "a mountain village in winter", "black holes",
            "a small bookshop", "the water cycle", "a robot learning to paint", "ancient Rome's aqueducts",
            "a rainy afternoon in Tokyo", "how airplanes fly", "a grandmother's recipe", "coral reefs",
            "the first day of school", "a desert expedition", "how vaccines work", "a city after a snowstorm",
            "the moon landing", "a fisherman and the sea", "how the internet routes packets", "autumn in a forest",
            "a violin maker", "plate tectonics", "a friendship between two rivals", "the invention of the telephone"]
STYLES = ["Write a short story about {s}.", "Explain {s} to a ten-year-old.", "Describe {s} in vivid detail.",
          "Write a letter to a friend about {s}.", "Write a short essay on {s}.", "Write a poem about {s}.",
          "Give an overview of {s} for a general audience.", "Tell the story of {s} as a news report."]
CODE_TASKS = ["Repeat this Python file exactly, but rename the function {f} to {f}_v2 everywhere. Output only the full file.",
              "Explain what this Python code does, function by function.",
              "Add type hints and docstrings to this Python code. Output only the code.",
              "Write unit tests with pytest for this Python code.",
              "Rewrite this Python code to be more readable, keeping its behaviour. Output only the code."]


def chatml(user: str) -> str:
    return f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def code_snippets(rng: random.Random, n: int) -> list[str]:
    files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))
    out = []
    for path in rng.sample(files, min(len(files), n * 2)):
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        defs = [i for i, ln in enumerate(lines) if ln.startswith("def ") or ln.startswith("class ")]
        if not defs:
            continue
        start = rng.choice(defs)
        out.append("\n".join(lines[start:start + 30]))
        if len(out) == n:
            break
    return out


def prompts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    snippets = code_snippets(rng, n)
    for i in range(n):
        if i % 2 == 0 and snippets:
            code = snippets[(i // 2) % len(snippets)]
            name = next((ln.split()[1].split("(")[0].split(":")[0] for ln in code.splitlines()
                         if ln.startswith(("def ", "class "))), "main")
            task = rng.choice(CODE_TASKS).format(f=name)
            out.append(chatml(f"{task}\n\n```python\n{code}\n```"))
        else:
            out.append(chatml(rng.choice(STYLES).format(s=rng.choice(SUBJECTS))))
    return out


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def generate(args) -> list[tuple[list[int], int]]:
    """(prompt + answer ids, prompt length) per prompt, until --data-tokens answer tokens."""
    path = os.path.join(args.work, "data.json")
    if os.path.exists(path):
        data = json.load(open(path))
        if sum(len(s) - p for s, p in data) >= args.data_tokens:
            log(f"reusing {path}")
            return data
    import socket
    from concurrent.futures import ThreadPoolExecutor

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    par = 4
    cmd = [args.specula, "serve", "-m", args.target, "--port", str(port), "--parallel", str(par),
           "--ctx", str(par * 2048), "--spec", "ngram"]
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(args.work, "serve.log"), "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/health", timeout=1)
                break
            except Exception:
                time.sleep(0.5)
        data, total, t0 = [], 0, time.time()

        def one(p):
            ids = post(base + "/tokenize", {"content": p, "parse_special": True})["tokens"]
            r = post(base + "/completion", {"prompt": ids, "n_predict": args.answer_tokens, "temperature": 0,
                                            "return_tokens": True, "cache_prompt": False})
            return ids, r["tokens"]

        batch = prompts(args.seed, 4096)
        with ThreadPoolExecutor(par) as ex:
            for i in range(0, len(batch), par):
                for ids, ans in ex.map(one, batch[i:i + par]):
                    if len(ans) >= 8:
                        data.append((ids + ans, len(ids)))
                        total += len(ans)
                log(f"data: {len(data)} answers, {total} tokens, {total / (time.time() - t0):.0f} tok/s")
                if total >= args.data_tokens:
                    break
        json.dump(data, open(path, "w"))
        return data
    finally:
        srv.terminate()
        srv.wait()


# ---------------------------------------------------------------------------------------------
# 2. The target (Qwen2) in float32 torch, for its layer inputs.

class Target:
    def __init__(self, path, torch):
        from gguf import GGUFReader
        from gguf.quants import dequantize

        self.torch = torch
        r = GGUFReader(path)
        kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
        self.arch = kv["general.architecture"]
        if self.arch != "qwen2":
            raise SystemExit(f"error: {path}: architecture {self.arch}; this script trains heads for qwen2 targets")
        a = self.arch + "."
        self.E, self.L = kv[a + "embedding_length"], kv[a + "block_count"]
        self.H, self.Hkv = kv[a + "attention.head_count"], kv[a + "attention.head_count_kv"]
        self.F = kv[a + "feed_forward_length"]
        self.eps = float(kv[a + "attention.layer_norm_rms_epsilon"])
        self.base = float(kv.get(a + "rope.freq_base", 10000.0))
        self.hd = self.E // self.H
        self.reader = r
        self.t = {}
        for x in r.tensors:
            w = dequantize(x.data, x.tensor_type).astype(np.float32)
            self.t[x.name] = torch.from_numpy(w.reshape([int(d) for d in reversed(x.shape.tolist())]).copy())
        self.V = self.t["token_embd.weight"].shape[0]
        self.layers = [2, self.L // 2, self.L - 3]

    def rms(self, x, w):
        return x * self.torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def taps(self, ids):
        """[T, 3, E] inputs of self.layers for one sequence."""
        torch, t = self.torch, self.t
        T = len(ids)
        x = t["token_embd.weight"][torch.tensor(ids)]
        pos = torch.arange(T, dtype=torch.float64)
        inv = self.base ** (-torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd)
        ang = pos[:, None] * inv[None, :]
        cos, sin = ang.cos().float(), ang.sin().float()
        out = []
        for il in range(max(self.layers) + 1):
            if il in self.layers:
                out.append(x.clone())
            if il == max(self.layers):
                break
            p = f"blk.{il}."
            h = self.rms(x, t[p + "attn_norm.weight"])
            q = (h @ t[p + "attn_q.weight"].T + t[p + "attn_q.bias"]).view(T, self.H, self.hd)
            k = (h @ t[p + "attn_k.weight"].T + t[p + "attn_k.bias"]).view(T, self.Hkv, self.hd)
            v = (h @ t[p + "attn_v.weight"].T + t[p + "attn_v.bias"]).view(T, self.Hkv, self.hd)
            q, k = rope_neox(q, cos, sin), rope_neox(k, cos, sin)
            rep = self.H // self.Hkv
            o = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(0, 1), k.repeat_interleave(rep, 1).transpose(0, 1), v.repeat_interleave(rep, 1).transpose(0, 1),
                is_causal=True).transpose(0, 1).reshape(T, self.E)
            x = x + o @ t[p + "attn_output.weight"].T
            h = self.rms(x, t[p + "ffn_norm.weight"])
            g = h @ t[p + "ffn_gate.weight"].T
            x = x + (torch.nn.functional.silu(g) * (h @ t[p + "ffn_up.weight"].T)) @ t[p + "ffn_down.weight"].T
        order = sorted(self.layers)
        return torch.stack([out[order.index(L)] for L in self.layers], 1)


def rope_neox(x, cos, sin):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return __import__("torch").cat([a * c - b * s, a * s + b * c], -1)


def rope_norm(x, cos, sin):
    """NORM pairing (2i, 2i+1): the layout llama.cpp's eagle3 graph rotates (the converter permutes
    HF weights into it; this head is trained in it directly)."""
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    return __import__("torch").stack([a * c - b * s, a * s + b * c], -1).flatten(-2)


# ---------------------------------------------------------------------------------------------
# 3. The head.

def make_head(torch, tgt: Target, vocab_ids):
    nn = torch.nn
    E, H, Hkv, hd, F = tgt.E, tgt.H, tgt.Hkv, tgt.hd, tgt.F

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3 * E, E, bias=False)
            self.attn_norm = nn.Parameter(torch.ones(E))
            self.hidden_norm = nn.Parameter(torch.ones(E))
            self.q = nn.Linear(2 * E, H * hd, bias=False)
            self.k = nn.Linear(2 * E, Hkv * hd, bias=False)
            self.v = nn.Linear(2 * E, Hkv * hd, bias=False)
            self.o = nn.Linear(H * hd, E, bias=False)
            self.ffn_norm = nn.Parameter(torch.ones(E))
            self.gate = nn.Linear(E, F, bias=False)
            self.up = nn.Linear(E, F, bias=False)
            self.down = nn.Linear(F, E, bias=False)
            self.out_norm = nn.Parameter(tgt.t["output_norm.weight"].clone())
            out = tgt.t["output.weight"] if "output.weight" in tgt.t else tgt.t["token_embd.weight"]
            self.lm = nn.Parameter(out[torch.tensor(vocab_ids)].clone())
            with torch.no_grad():
                # Start from the target's own view: g = the deepest tap (its "logit lens"), small
                # attention and FFN updates on top.
                self.fc.weight.zero_()
                self.fc.weight[:, 2 * E:] = torch.eye(E)
                self.o.weight.mul_(0.1)
                self.down.weight.mul_(0.1)

        def rms(self, x, w):
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + tgt.eps) * w

    return Head()


def head_forward(torch, tgt, head, ids, feats, ttt, cos, sin):
    """One sequence: ids [T] (x_0 .. x_{T-1}), feats [T, 3E]. Returns logits per TTT step j:
    [T-1-j, Vd] for the pairs p = 0 .. T-2-j (step j's row p is at position p + j)."""
    E, H, Hkv, hd = tgt.E, tgt.H, tgt.Hkv, tgt.hd
    emb = tgt.t["token_embd.weight"]
    n = len(ids) - 1
    g = head.fc(feats[:n])                          # g_p, p = 0 .. n-1
    x_next = torch.tensor(ids[1:])                  # x_{p+1}
    rep = H // Hkv
    outs, ks, vs = [], [], []
    for j in range(ttt):
        m = n - j
        tok = x_next[j:j + m] if j == 0 else torch.tensor(ids[1 + j:1 + j + m])
        gin = g[:m] if j == 0 else y[:m]
        en = head.rms(emb[tok], head.attn_norm)
        gn = head.rms(gin, head.hidden_norm)
        cat = torch.cat([en, gn], -1)
        c, s = cos[j:j + m], sin[j:j + m]           # row p sits at position p + j
        q = rope_norm(head.q(cat).view(m, H, hd), c, s)
        k = rope_norm(head.k(cat).view(m, Hkv, hd), c, s).repeat_interleave(rep, 1)
        v = head.v(cat).view(m, Hkv, hd).repeat_interleave(rep, 1)
        ks.append(k)
        vs.append(v)
        # Scores: the teacher-forced pairs 0..p (step 0's keys, causal) and row p's own steps 1..j.
        s0 = torch.einsum("qhd,khd->hqk", q, ks[0][:m]) / math.sqrt(hd)
        s0 = s0.masked_fill(torch.ones(m, m, dtype=torch.bool).triu(1)[None], float("-inf"))
        diag = [torch.einsum("qhd,qhd->hq", q, ks[i][:m])[..., None] / math.sqrt(hd) for i in range(1, j + 1)]
        a = torch.softmax(torch.cat([s0] + diag, -1), -1)
        o = torch.einsum("hqk,khd->qhd", a[..., :m], vs[0][:m])
        for i in range(1, j + 1):
            o = o + a[..., m + i - 1].transpose(0, 1)[..., None] * vs[i][:m]
        hres = head.o(o.reshape(m, H * hd)) + gin  # residual: g (norm_before_residual false)
        hn = head.rms(hres, head.ffn_norm)
        y = hres + head.down(torch.nn.functional.silu(head.gate(hn)) * head.up(hn))
        outs.append(head.rms(y, head.out_norm) @ head.lm.T)
    return outs


def write_gguf(tgt: Target, head, vocab_ids, path: str, torch):
    import gguf

    w = gguf.GGUFWriter(path, "eagle3")
    w.add_string("general.name", "specula EAGLE-3 head (tools/train_eagle3.py)")
    a = "eagle3."
    w.add_uint32(a + "context_length", 32768)
    w.add_uint32(a + "embedding_length", tgt.E)
    w.add_uint32(a + "block_count", 1)
    w.add_uint32(a + "feed_forward_length", tgt.F)
    w.add_uint32(a + "attention.head_count", tgt.H)
    w.add_uint32(a + "attention.head_count_kv", tgt.Hkv)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", tgt.eps)
    w.add_float32(a + "rope.freq_base", tgt.base)
    w.add_uint32(a + "rope.dimension_count", tgt.hd)
    w.add_uint32(a + "vocab_size", tgt.V)
    w.add_array(a + "target_layers", tgt.layers)
    w.add_uint32(a + "target_hidden_size", tgt.E)
    w.add_bool(a + "norm_before_residual", False)
    w.add_bool(a + "norm_before_fc", False)
    # The target's vocabulary, as llama.cpp's converter copies it into the head.
    for k, f in tgt.reader.fields.items():
        if not k.startswith("tokenizer."):
            continue
        v = f.contents()
        if isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, list):
            w.add_array(k, v)
    f16 = lambda p: p.detach().to(torch.float16).numpy()  # noqa: E731
    f32 = lambda p: p.detach().float().numpy()  # noqa: E731
    w.add_tensor("fc.weight", f16(head.fc.weight))
    w.add_tensor("blk.0.attn_norm.weight", f32(head.attn_norm))
    w.add_tensor("blk.0.attn_norm_2.weight", f32(head.hidden_norm))
    w.add_tensor("blk.0.attn_q.weight", f16(head.q.weight))
    w.add_tensor("blk.0.attn_k.weight", f16(head.k.weight))
    w.add_tensor("blk.0.attn_v.weight", f16(head.v.weight))
    w.add_tensor("blk.0.attn_output.weight", f16(head.o.weight))
    w.add_tensor("blk.0.ffn_norm.weight", f32(head.ffn_norm))
    w.add_tensor("blk.0.ffn_gate.weight", f16(head.gate.weight))
    w.add_tensor("blk.0.ffn_up.weight", f16(head.up.weight))
    w.add_tensor("blk.0.ffn_down.weight", f16(head.down.weight))
    w.add_tensor("output_norm.weight", f32(head.out_norm))
    w.add_tensor("output.weight", f16(head.lm))
    w.add_tensor("d2t", np.asarray(vocab_ids, dtype=np.int64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=45.0, help="training time (after data and features)")
    ap.add_argument("--data-tokens", type=int, default=120000, help="answer tokens to generate")
    ap.add_argument("--answer-tokens", type=int, default=384)
    ap.add_argument("--draft-vocab", type=int, default=16384)
    ap.add_argument("--ttt", type=int, default=3, help="training-time-test steps")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--specula", default=os.path.join(ROOT, "build", "release", "specula"))
    ap.add_argument("--work", default="/tmp/specula_eagle3_train")
    ap.add_argument("--holdout", type=float, default=0.1, help="share of the answers kept out of training, for "
                    "the validation accuracy that picks the head written (the best seen)")
    ap.add_argument("--max-sequences", type=int, default=0, help="use at most this many answers (0: all; smoke runs)")
    args = ap.parse_args()
    import torch

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    t_start = time.time()
    data = generate(args)
    if args.max_sequences > 0:
        data = data[:args.max_sequences]
    log(f"{len(data)} sequences, {sum(len(s) for s, _ in data)} tokens ({time.time() - t_start:.0f} s)")

    tgt = Target(args.target, torch)
    log(f"target: {tgt.arch}, n_embd {tgt.E}, {tgt.L} layers, taps {tgt.layers}")
    # The draft vocabulary: the most frequent answer tokens (d2t, ascending target ids).
    counts = np.bincount(np.concatenate([np.asarray(s[p:], dtype=np.int64) for s, p in data]), minlength=tgt.V)
    vocab_ids = np.sort(np.argsort(-counts, kind="stable")[:args.draft_vocab])
    covered = counts[vocab_ids].sum() / counts.sum()
    log(f"draft vocabulary: {len(vocab_ids)} tokens cover {100 * covered:.1f}% of the answer tokens")
    t2d = np.full(tgt.V, -1, dtype=np.int64)
    t2d[vocab_ids] = np.arange(len(vocab_ids))

    # Features of every sequence (float16 in memory), the target forward once.
    feats = []
    t0 = time.time()
    with torch.no_grad():
        for i, (seq, _) in enumerate(data):
            feats.append(tgt.taps(seq).reshape(len(seq), -1).to(torch.float16))
            if (i + 1) % 20 == 0:
                n = sum(len(s) for s, _ in data[:i + 1])
                log(f"features: {i + 1}/{len(data)} sequences, {n / (time.time() - t0):.0f} tok/s")

    head = make_head(torch, tgt, vocab_ids)
    params = [p for n, p in head.named_parameters()]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    Tmax = max(len(s) for s, _ in data) + args.ttt + 2
    inv = tgt.base ** (-torch.arange(0, tgt.hd, 2, dtype=torch.float64) / tgt.hd)
    ang = torch.arange(Tmax, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos().float(), ang.sin().float()
    deadline = time.time() + 60 * args.minutes
    rng = random.Random(args.seed)
    everything = list(range(len(data)))
    rng.shuffle(everything)
    n_val = int(round(args.holdout * len(data))) if len(data) > 1 else 0
    val, order = everything[:n_val], everything[n_val:]

    def step_losses(i):
        seq, plen = data[i]
        outs = head_forward(torch, tgt, head, seq, feats[i].float(), args.ttt, cos, sin)
        loss, accs = 0.0, []
        for j, logits in enumerate(outs):
            # row p of step j predicts x_{p+j+2}; only answer positions count.
            labels = torch.tensor(t2d[np.asarray(seq[j + 2:], dtype=np.int64)])
            rows = logits[:labels.shape[0]]
            mask = (labels >= 0) & (torch.arange(labels.shape[0]) + j + 2 >= plen)
            if mask.sum() == 0:
                continue
            loss = loss + (0.8 ** j) * torch.nn.functional.cross_entropy(rows[mask], labels[mask])
            accs.append((rows[mask].argmax(-1) == labels[mask]).float().mean().item())
        return loss, accs

    def validate():
        if not val:
            return None
        with torch.no_grad():
            a = [step_losses(i)[1] for i in val]
        a = [x for x in a if x]
        return float(np.mean([x[0] for x in a])) if a else None

    best, best_state = -1.0, None
    step, ema = 0, None
    total_steps_guess = None
    t_train = time.time()
    while time.time() < deadline:
        rng.shuffle(order)
        for i in order:
            if time.time() >= deadline:
                break
            loss, accs = step_losses(i)
            if not torch.is_tensor(loss):
                continue
            # cosine decay over the time budget
            frac = min(1.0, (time.time() - t_train) / max(1.0, deadline - t_train))
            for gp in opt.param_groups:
                gp["lr"] = args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            a0 = accs[0] if accs else 0.0
            ema = a0 if ema is None else 0.95 * ema + 0.05 * a0
            if step % 10 == 0:
                log(f"step {step}: loss {loss.item():.3f}, step-0 accuracy {a0:.3f} (ema {ema:.3f}), "
                    f"per step {[round(x, 3) for x in accs]}, {(deadline - time.time()) / 60:.1f} min left")
            if step % 100 == 0:
                v = validate()
                if v is not None:
                    log(f"step {step}: held-out step-0 accuracy {v:.3f} (best {max(best, v):.3f})")
                    if v > best:
                        best, best_state = v, {k: x.detach().clone() for k, x in head.state_dict().items()}
    v = validate()
    if v is not None:
        log(f"held-out step-0 accuracy at the end {v:.3f} (best before {max(best, 0.0):.3f})")
    if v is not None and v < best and best_state is not None:
        head.load_state_dict(best_state)
        log(f"writing the best held-out head (step-0 accuracy {best:.3f}; the last had {v:.3f})")
    write_gguf(tgt, head, vocab_ids, args.out, torch)
    log(f"wrote {args.out} after {step} steps ({(time.time() - t_start) / 60:.1f} min in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
