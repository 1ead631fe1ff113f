#!/usr/bin/env python3
"""Float64 oracle for Gemma 3 270M: an independent numpy forward pass over the GGUF's
weights, dequantized with the `gguf` package's reference dequantizers, with no activation
quantization. Used to judge how far specula and llama.cpp each are from the exact model.

usage: python3 tools/gemma3_f64_reference.py CASE_INDEX N_TOKENS
  Evaluates the first N_TOKENS of case CASE_INDEX of tests/fixtures/gemma3_reference.json,
  prints per position the f64 argmax vs llama.cpp's and max |f64 - llama.cpp| over the
  recorded ids, and saves the f64 logits to /tmp/ref/np_logits_CASE_N.npy.
Slow (about a minute per 30 tokens); not run by the tests.
"""
import os
import numpy as np, json, sys
from gguf import GGUFReader
from gguf.quants import dequantize
MODEL = os.path.join(os.environ.get('SPECULA_MODELS', os.path.expanduser('~/.cache/specula/models')), 'gemma-3-270m-q4_k_m.gguf')
r = GGUFReader(MODEL)
os.makedirs('/tmp/ref', exist_ok=True)
T = {t.name: t for t in r.tensors}
def W(name):
    t = T[name]
    a = dequantize(t.data, t.tensor_type).astype(np.float64)
    return a.reshape([int(x) for x in reversed(t.shape.tolist())]) if a.ndim==1 and len(t.shape)>1 else a
E=640; nh=4; nkv=1; hd=256; F=2048; L=18; eps=1e-6; win=512
def rms(x, w): return x / np.sqrt((x*x).mean(-1, keepdims=True) + eps) * w
def rope(x, pos, base):  # x [T, H, hd]
    half = hd//2
    inv = base ** (-2.0*np.arange(half)/hd)
    th = pos[:,None]*inv[None,:]
    c, s = np.cos(th)[:,None,:], np.sin(th)[:,None,:]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a*c - b*s, a*s + b*c], -1)
def gelu(x): return 0.5*x*(1+np.tanh(np.sqrt(2/np.pi)*(x+0.044715*x**3)))
def forward(ids):
    emb = W('token_embd.weight')
    x = emb[ids] * np.sqrt(E)  # computed in f32 in ggml: sqrtf(640)
    Tn = len(ids); pos = np.arange(Tn, dtype=np.float64)
    for il in range(L):
        g = f'blk.{il}.'
        glob = (il+1) % 6 == 0
        h = rms(x, W(g+'attn_norm.weight'))
        q = (h @ W(g+'attn_q.weight').T).reshape(Tn, nh, hd)
        k = (h @ W(g+'attn_k.weight').T).reshape(Tn, nkv, hd)
        v = (h @ W(g+'attn_v.weight').T).reshape(Tn, nkv, hd)
        q = rms(q, W(g+'attn_q_norm.weight')); k = rms(k, W(g+'attn_k_norm.weight'))
        base = 1e6 if glob else 1e4
        q = rope(q, pos, base); k = rope(k, pos, base)
        out = np.zeros((Tn, nh, hd))
        for t in range(Tn):
            lo = 0 if glob else max(0, t-win+1)
            for hh in range(nh):
                s = k[lo:t+1, 0, :] @ q[t, hh] / 16.0
                p = np.exp(s - s.max()); p /= p.sum()
                out[t, hh] = p @ v[lo:t+1, 0, :]
        o = out.reshape(Tn, nh*hd) @ W(g+'attn_output.weight').T
        x = x + rms(o, W(g+'post_attention_norm.weight'))
        h = rms(x, W(g+'ffn_norm.weight'))
        a = gelu(h @ W(g+'ffn_gate.weight').T) * (h @ W(g+'ffn_up.weight').T)
        d = a @ W(g+'ffn_down.weight').T
        x = x + rms(d, W(g+'post_ffw_norm.weight'))
    x = rms(x, W('output_norm.weight'))
    return x @ emb.T
fx = json.load(open(os.path.join(os.path.dirname(__file__), '..', 'tests', 'fixtures', 'gemma3_reference.json')))
case = fx['cases'][int(sys.argv[1])]
ids = case['prompt_ids'] + case['greedy_ids']
n = int(sys.argv[2]) if len(sys.argv) > 2 else len(ids)
ids = ids[:n]
logits = forward(np.array(ids))
np.save(f'/tmp/ref/np_logits_{sys.argv[1]}_{n}.npy', logits.astype(np.float32))
t = case['teacher']
fixed = fx['fixed_ids']
md = 0
for r_ in range(n):
    ref = np.array(t['fixed_logits'][r_]); ours = logits[r_, fixed]
    tid = t['top_ids'][r_]; d2 = np.abs(logits[r_, tid] - np.array(t['top_logits'][r_])).max()
    md = max(md, np.abs(ours-ref).max(), d2)
    print(r_, 'argmax np', logits[r_].argmax(), 'llama', t['argmax'][r_], 'max|np-llama|', round(max(np.abs(ours-ref).max(), d2),4))
print('max', md)
