#!/usr/bin/env python3
"""tools/make_lora_fixtures.py — random LoRA adapters in llama.cpp's GGUF LoRA format for the tiny
random-weight base models of tools/make_arch_fixtures.py, and llama.cpp's outputs with them (the
oracle of tests/model/lora_test.cpp).

An adapter file is what llama.cpp's convert_lora_to_gguf.py writes: general.type "adapter",
adapter.type "lora", adapter.lora.alpha (left out by one adapter: llama.cpp then scales by 1),
general.architecture the base's, and per adapted weight W (its GGUF name, e.g.
blk.0.attn_q.weight) W.lora_a of numpy shape [rank, n_in] (GGUF [n_in, rank]) and W.lora_b
[n_out, rank]. ADAPTERS says what each exercises: ranks 2-8, f32 and f16, all seven projections
or a few in some layers, user scales 1, 0.75 and 0.5, three architectures (llama with llama3
rope, qwen3 with QK-norm and F16 weights, gemma2 with softcaps and sandwich norms).
The merge oracle: merged_<name>.gguf is the base written again with W + scale · (alpha / rank) ·
B A in f32 (float64 arithmetic) in place of each adapted W, so the unmerged path can be checked
against a model that has no adapter at all.

Usage:
  python3 tools/make_lora_fixtures.py --models-only --out DIR [--check] [--only NAME,...]
      writes DIR/arch_<base>.gguf, DIR/lora_<name>.gguf and DIR/merged_<name>.gguf (numpy + gguf
      only; the tests run this at test time — weights are never committed); --check fails unless
      each adapter and merged file is byte for byte the one the fixture was made from (sha256);
  python3 tools/make_lora_fixtures.py --adapter-for MODEL.gguf --out FILE [--rank R] [--seed S] [--targets all]
      writes a random adapter (f32, alpha 2·rank, attn_q and attn_v of every layer, or the listed
      projections) for any GGUF model, e.g. Gemma 3 270M for the command-line tests;
  python3 tools/make_lora_fixtures.py
      also runs llama.cpp (llama-cpp-python: Llama(lora_path=..., lora_scale=...),
      tools/install_reference.sh) and writes tests/fixtures/lora_reference.json: per adapter its
      base, rank, alpha, scale, the files' sha256, probe ids, and per prompt llama.cpp's greedy
      continuation and teacher-forced argmax / top 8 / probe logits (tools/llama_oracle.py).
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

import make_arch_fixtures as arch
import make_hf_folders as hff  # its tiny qwen2_t / gemma3_t shapes join arch.SHAPES; HF folders of the bases
from llama_oracle import greedy_and_teacher_forced, no_extra_buffers, sha256, write_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "fixtures", "lora_reference.json")
F32, F16 = np.float32, np.float16
ALL = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]

# base: a make_arch_fixtures model; layers None = every layer; alpha None = no alpha key.
ADAPTERS = {
    "llama_a_r4": dict(base="llama_a", seed=5101, rank=4, alpha=8.0, dt=F32, scale=1.0, targets=ALL, layers=None,
                       shape="rank 4, alpha 8, f32, all seven projections of every layer, scale 1"),
    "llama_a_r8_f16": dict(base="llama_a", seed=5102, rank=8, alpha=None, dt=F16, scale=0.5,
                           targets=["attn_q", "attn_v"], layers=[0, 2],
                           shape="rank 8, no alpha (scale 1 per pair), f16, q and v of layers 0 and 2, scale 0.5"),
    "llama_a_r2_mlp": dict(base="llama_a", seed=5103, rank=2, alpha=4.0, dt=F32, scale=1.0,
                           targets=["ffn_gate", "ffn_up", "ffn_down"], layers=None,
                           shape="rank 2, alpha 4, f32, the MLP only, scale 1"),
    "llama_a_r6_o": dict(base="llama_a", seed=5104, rank=6, alpha=3.0, dt=F16, scale=0.75,
                         targets=["attn_output", "attn_k"], layers=[1, 3],
                         shape="rank 6, alpha 3, f16, output and k of layers 1 and 3, scale 0.75"),
    "qwen3_b_r4": dict(base="qwen3_b", seed=5201, rank=4, alpha=4.0, dt=F16, scale=1.0, targets=ALL, layers=None,
                       shape="rank 4, alpha 4, f16, all seven projections (F16 base, QK-norm), scale 1"),
    "gemma2_a_r2": dict(base="gemma2_a", seed=5301, rank=2, alpha=4.0, dt=F32, scale=0.75, targets=ALL, layers=None,
                        shape="rank 2, alpha 4, f32, all seven projections (softcaps, sandwich norms), scale 0.75"),
}
# PEFT folders (adapter_config.json + adapter_model.safetensors, as peft's save_pretrained
# writes them) for bases that make_hf_folders.py also writes as Hugging Face folders (the
# llama one has its Q/K rows permuted between the two layouts). oracle: llama.cpp judges the
# GGUF that its own convert_lora_to_gguf.py makes from the folder (torch is needed for that:
# tools/install_training.sh); same_as: a folder that must give another's outputs (rslora with
# alpha chosen so that alpha / sqrt(r) equals the other's alpha / r).
PEFT_ALL = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
PEFT_TO_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                "mlp.down_proj": "ffn_down"}
PEFT_ADAPTERS = {
    "peft_llama_a_r4": dict(base="llama_a", seed=5401, r=4, alpha=8.0, dt="f32", scale=1.0, modules=PEFT_ALL,
                            layers=None, rank_pattern={}, rslora=False,
                            shape="llama (Q/K permuted), r 4, alpha 8, f32, all seven modules, scale 1"),
    "peft_qwen2_t_r8": dict(base="qwen2_t", seed=5402, r=8, alpha=16.0, dt="bf16", scale=0.5,
                            modules=PEFT_ALL[:4], layers=None, rank_pattern={"model.layers.1.self_attn.q_proj": 4},
                            rslora=False,
                            shape="qwen2 (q/k/v biases), r 8 (rank_pattern: 4 for layer 1's q_proj), alpha 16, bf16, "
                                  "the attention modules, scale 0.5"),
    "peft_gemma3_t_r2": dict(base="gemma3_t", seed=5403, r=2, alpha=4.0, dt="f16", scale=1.0,
                             modules=["self_attn.q_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"],
                             layers=[0, 3, 5], rank_pattern={}, rslora=False,
                             shape="gemma3 (sliding window, q/k norms), r 2, alpha 4, f16, q and the MLP of layers "
                                   "0, 3 and 5, scale 1"),
    "peft_llama_a_r4_rslora": dict(base="llama_a", seed=5401, r=4, alpha=4.0, dt="f32", scale=1.0, modules=PEFT_ALL,
                                   layers=None, rank_pattern={}, rslora=True, same_as="peft_llama_a_r4",
                                   shape="peft_llama_a_r4's tensors with use_rslora and alpha 4 (4 / sqrt 4 = 8 / 4)"),
}
N_CTX, N_GEN = 256, 24
PROMPT_LENGTHS = [5, 17, 40]


def adapter_tensors(name: str, base_path: str) -> dict:
    """{base weight name: (A [rank, n_in], B [n_out, rank])} in the adapter's dtype."""
    import gguf

    a = ADAPTERS[name]
    rng = np.random.default_rng(a["seed"])
    reader = gguf.GGUFReader(base_path)
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in reader.tensors}  # GGUF order [n_in, n_out]
    n_layers = 1 + max(int(n.split(".")[1]) for n in shapes if n.startswith("blk."))
    layers = a["layers"] if a["layers"] is not None else range(n_layers)
    out = {}
    for il in layers:
        for t in a["targets"]:
            w = f"blk.{il}.{t}.weight"
            n_in, n_out = shapes[w]
            r = a["rank"]
            A = rng.standard_normal((r, n_in)) / np.sqrt(n_in)
            B = rng.standard_normal((n_out, r)) * (0.6 / np.sqrt(r))
            out[w] = (A.astype(a["dt"]), B.astype(a["dt"]))
    return out


def pair_scale(name: str) -> float:
    a = ADAPTERS[name]
    return a["scale"] * (a["alpha"] / a["rank"] if a["alpha"] else 1.0)


def write_adapter(name: str, base_path: str, path: str):
    import gguf

    a = ADAPTERS[name]
    w = gguf.GGUFWriter(path, arch.SHAPES[a["base"]]["arch"])
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    if a["alpha"] is not None:
        w.add_float32("adapter.lora.alpha", a["alpha"])
    w.add_string("general.name", f"specula lora fixture {a['seed']} (random weights)")
    for wname, (A, B) in adapter_tensors(name, base_path).items():
        w.add_tensor(wname + ".lora_a", A)
        w.add_tensor(wname + ".lora_b", B)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


class MergedBuilder(arch.Builder):
    """The base model's builder (same random draws) writing W + delta in f32 for adapted weights."""

    def __init__(self, name, path, deltas):
        super().__init__(name, path)
        self.deltas = deltas

    def tensor(self, name, data):
        if name in self.deltas:
            stored = data.astype(self.s["dt"]).astype(np.float64)  # W as the base file stores it
            self.w.add_tensor(name, (stored + self.deltas[name]).astype(F32))
            return
        super().tensor(name, data)


def write_merged(name: str, base_path: str, path: str):
    s = pair_scale(name)
    deltas = {w: s * (B.astype(np.float64) @ A.astype(np.float64))
              for w, (A, B) in adapter_tensors(name, base_path).items()}
    base = ADAPTERS[name]["base"]
    b = MergedBuilder(base, path, deltas)
    arch.WRITERS[b.arch](b)
    b.finish()


def adapter_for(model_path: str, out: str, rank: int, seed: int, targets=("attn_q", "attn_v")):
    import gguf

    reader = gguf.GGUFReader(model_path)
    arch_name = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(out, arch_name)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 2.0 * rank)
    for t in reader.tensors:
        if t.name.startswith("blk.") and t.name.split(".")[2] in targets and t.name.endswith(".weight"):
            n_in, n_out = (int(x) for x in t.shape[:2])
            w.add_tensor(t.name + ".lora_a", (rng.standard_normal((rank, n_in)) / np.sqrt(n_in)).astype(F32))
            w.add_tensor(t.name + ".lora_b", (rng.standard_normal((n_out, rank)) * (0.5 / np.sqrt(rank))).astype(F32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def peft_tensors(name: str, base_path: str) -> dict:
    """{module name (model.layers.N.<module>): (A [rank, n_in], B [n_out, rank])} in float32."""
    import gguf

    a = PEFT_ADAPTERS[name]
    rng = np.random.default_rng(a["seed"])
    reader = gguf.GGUFReader(base_path)
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in reader.tensors}
    n_layers = 1 + max(int(n.split(".")[1]) for n in shapes if n.startswith("blk."))
    out = {}
    for il in (a["layers"] if a["layers"] is not None else range(n_layers)):
        for m in a["modules"]:
            module = f"model.layers.{il}.{m}"
            n_in, n_out = shapes[f"blk.{il}.{PEFT_TO_GGUF[m]}.weight"]
            r = a["rank_pattern"].get(module, a["r"])
            A = rng.standard_normal((r, n_in)) / np.sqrt(n_in)
            B = rng.standard_normal((n_out, r)) * (0.6 / np.sqrt(r))
            out[module] = (A.astype(F32), B.astype(F32))
    return out


def write_peft(name: str, base_path: str, folder: str):
    """A PEFT LoRA folder as peft's save_pretrained writes it (adapter_config.json +
    adapter_model.safetensors with base_model.model.<module>.lora_A/lora_B.weight)."""
    from safetensors.numpy import save_file

    a = PEFT_ADAPTERS[name]
    arrays = {}
    for module, (A, B) in peft_tensors(name, base_path).items():
        for kind, x in (("lora_A", A), ("lora_B", B)):
            key = f"base_model.model.{module}.{kind}.weight"
            arrays[key] = (hff.to_bf16_bits(x) if a["dt"] == "bf16" else
                           np.ascontiguousarray(x.astype(F16 if a["dt"] == "f16" else F32)))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": f"specula-tiny/{a['base']}",
              "r": a["r"], "lora_alpha": a["alpha"], "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
              "target_modules": sorted({m.split(".")[-1] for m in a["modules"]}), "use_rslora": a["rslora"],
              "use_dora": False, "modules_to_save": None, "rank_pattern": a["rank_pattern"], "alpha_pattern": {},
              "layers_to_transform": a["layers"], "init_lora_weights": True, "inference_mode": True}
    tmp = folder + ".tmp"
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    st = os.path.join(tmp, "adapter_model.safetensors")
    save_file(arrays, st, metadata={"format": "pt"})
    if a["dt"] == "bf16":
        hff.retag_bf16(st, set(arrays))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def convert_peft(folder: str, hf_base: str, out: str):
    """llama.cpp's own converter (convert_lora_to_gguf.py from the llama-cpp-python sdist's
    vendored source; needs torch: tools/install_training.sh) on the folder, f32 out."""
    import subprocess

    src = os.environ.get("LLAMA_CPP_SRC", os.path.expanduser("~/.cache/specula/llama.cpp/0.3.36/src"))
    py = os.environ.get("TRAIN_PYTHON", os.path.expanduser("~/.cache/specula/train-venv/bin/python"))
    subprocess.run([py, os.path.join(src, "convert_lora_to_gguf.py"), "--base", hf_base, "--outtype", "f32",
                    "--outfile", out, folder], check=True, stdout=subprocess.DEVNULL)


def spec(name: str) -> dict:
    return ADAPTERS[name] if name in ADAPTERS else PEFT_ADAPTERS[name]


def prompts(name: str) -> list[list[int]]:
    rng = np.random.default_rng(spec(name)["seed"] + 1000)
    V = arch.SHAPES[spec(name)["base"]]["V"]
    return [[int(x) for x in rng.integers(2, V, n)] for n in PROMPT_LENGTHS]


def oracle(name: str, base_path: str, lora_path: str) -> list[dict]:
    from llama_cpp import Llama

    no_extra_buffers()
    llm = Llama(model_path=base_path, lora_path=lora_path, lora_scale=spec(name)["scale"], n_ctx=N_CTX,
                logits_all=True, n_threads=2, n_batch=N_CTX, verbose=False)
    V = arch.SHAPES[spec(name)["base"]]["V"]
    probe = [int(x) for x in np.random.default_rng(11).choice(V, 16, replace=False)]
    cases = greedy_and_teacher_forced(llm, prompts(name), N_GEN, probe)
    del llm
    return probe, cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-only", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--only")
    ap.add_argument("--adapter-for")
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--targets", default="attn_q,attn_v",
                    help="--adapter-for: the projections adapted in every layer (comma-separated GGUF names; "
                         "'all': the seven attention and MLP ones)")
    args = ap.parse_args()
    if args.adapter_for:
        targets = ALL if args.targets == "all" else [t.strip() for t in args.targets.split(",")]
        write_atomic(args.out, lambda tmp: adapter_for(args.adapter_for, tmp, args.rank, args.seed, targets))
        return 0
    known = list(ADAPTERS) + list(PEFT_ADAPTERS)
    names = [n.strip() for n in args.only.split(",")] if args.only else known
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"error: unknown adapter(s) {unknown}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    gguf_names = [n for n in names if n in ADAPTERS]
    peft_names = [n for n in names if n in PEFT_ADAPTERS]
    out = args.out or tempfile.mkdtemp(prefix="specula_lora_")
    os.makedirs(out, exist_ok=True)
    files = {}
    for base in sorted({spec(n)["base"] for n in names}):
        p = os.path.join(out, f"arch_{base}.gguf")
        write_atomic(p, lambda tmp, b=base: arch.write_model(b, tmp))
        files[base] = p
    for base in sorted({PEFT_ADAPTERS[n]["base"] for n in peft_names}):
        hff.write_folder(base, files[base], os.path.join(out, f"hf_{base}"))
    for n in gguf_names:
        base_path = files[ADAPTERS[n]["base"]]
        lp, mp = os.path.join(out, f"lora_{n}.gguf"), os.path.join(out, f"merged_{n}.gguf")
        write_atomic(lp, lambda tmp, n=n: write_adapter(n, base_path, tmp))
        write_atomic(mp, lambda tmp, n=n: write_merged(n, base_path, tmp))
        files[n] = (lp, mp)
    for n in peft_names:
        folder = os.path.join(out, n)
        write_peft(n, files[PEFT_ADAPTERS[n]["base"]], folder)
        files[n] = folder
    want, want_peft = {}, {}
    if args.check:
        with open(FIXTURE) as f:
            ref = json.load(f)
            want, want_peft = ref["adapters"], ref.get("peft", {})
    status = 0

    def check(n, kind, p, table):
        nonlocal status
        got = sha256(p)
        print(f"{p} {got}")
        if args.check and table.get(n, {}).get(kind) != got:
            print(f"error: {p} has sha256 {got}, but {FIXTURE} was made from {table.get(n, {}).get(kind)}",
                  file=sys.stderr)
            status = 1

    for n in gguf_names:
        lp, mp = files[n]
        check(n, "lora_sha256", lp, want)
        check(n, "merged_sha256", mp, want)
    for n in peft_names:
        check(n, "safetensors_sha256", os.path.join(files[n], "adapter_model.safetensors"), want_peft)
        check(n, "config_sha256", os.path.join(files[n], "adapter_config.json"), want_peft)
    if args.models_only:
        return status
    import llama_cpp

    adapters, peft = {}, {}
    if args.only and os.path.exists(FIXTURE):
        with open(FIXTURE) as f:
            ref = json.load(f)
            adapters, peft = ref["adapters"], ref.get("peft", {})
    for n in gguf_names:
        lp, mp = files[n]
        a = ADAPTERS[n]
        probe, cases = oracle(n, files[a["base"]], lp)
        distinct = [len(set(c["greedy"])) for c in cases]
        print(f"{n}: distinct tokens in the greedy continuations {distinct}")
        adapters[n] = {"base": a["base"], "arch": arch.SHAPES[a["base"]]["arch"], "shape": a["shape"],
                       "rank": a["rank"], "alpha": a["alpha"], "scale": a["scale"],
                       "base_sha256": sha256(files[a["base"]]), "lora_sha256": sha256(lp), "merged_sha256": sha256(mp),
                       "probe_ids": probe, "cases": cases}
    for n in peft_names:
        a = PEFT_ADAPTERS[n]
        entry = {"base": a["base"], "arch": arch.SHAPES[a["base"]]["arch"], "shape": a["shape"], "r": a["r"],
                 "alpha": a["alpha"], "rslora": a["rslora"], "rank_pattern": a["rank_pattern"], "scale": a["scale"],
                 "base_sha256": sha256(files[a["base"]]),
                 "safetensors_sha256": sha256(os.path.join(files[n], "adapter_model.safetensors")),
                 "config_sha256": sha256(os.path.join(files[n], "adapter_config.json"))}
        if "same_as" in a:
            entry["same_as"] = a["same_as"]
        else:
            converted = os.path.join(out, f"{n}.converted.gguf")
            convert_peft(files[n], os.path.join(out, f"hf_{a['base']}"), converted)
            probe, cases = oracle(n, files[a["base"]], converted)
            print(f"{n}: distinct tokens in the greedy continuations {[len(set(c['greedy'])) for c in cases]}")
            entry.update({"converted_sha256": sha256(converted), "probe_ids": probe, "cases": cases})
        peft[n] = entry
    ref = {"format": "lora_reference v2: per adapter its base model (tools/make_arch_fixtures.py), rank, alpha, "
                     "user scale, the sha256 of the base, adapter and merged files (tools/make_lora_fixtures.py "
                     "writes lora_<name>.gguf and merged_<name>.gguf), probe_ids, and per prompt: prompt ids, "
                     f"llama.cpp's greedy continuation ({N_GEN} tokens) with the adapter, and at every position "
                     "of prompt + continuation the argmax, top 8 ids and logits and the probe logits (teacher forced). "
                     "peft: PEFT folders (<name>/adapter_config.json + adapter_model.safetensors) and the same "
                     "cases from llama.cpp with the GGUF its convert_lora_to_gguf.py made from the folder "
                     "(converted_sha256), or same_as: the folder whose cases it must reproduce.",
           "oracle": f"llama-cpp-python {llama_cpp.__version__} (Llama(lora_path, lora_scale); CPU, f16 KV cache, "
                     f"n_ctx {N_CTX}, no extra buffer types); convert_lora_to_gguf.py of its vendored llama.cpp",
           "adapters": {n: adapters[n] for n in ADAPTERS if n in adapters},
           "peft": {n: peft[n] for n in PEFT_ADAPTERS if n in peft}}
    with open(FIXTURE, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {FIXTURE} ({os.path.getsize(FIXTURE)} bytes)")
    return status


if __name__ == "__main__":
    sys.exit(main())
