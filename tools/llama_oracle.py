"""tools/llama_oracle.py — llama.cpp (llama-cpp-python) as the oracle of the tiny-model fixtures
(tools/make_qwen35_fixtures.py, tools/make_arch_fixtures.py): a file's sha256, writing a model
atomically and checking written models against a fixture's sha256, and for a list of prompts
llama.cpp's greedy continuation and, teacher forced on prompt + continuation, every position's
argmax, top 8 ids with logits and the logits of fixed probe ids; and llama.cpp's speculative decoding
on token ids (tools/llama_spec_oracle.cpp: every draft and accepted count).
Does not know any model's layout (the callers write the models and the fixture)."""
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_atomic(path: str, write):
    """write(tmp_path) then rename onto path; returns write's result. The temporary name is unique
    per process: test processes may write the same model at once."""
    tmp = f"{path}.{os.getpid()}.tmp"
    result = write(tmp)
    os.replace(tmp, path)
    return result


def check_models(paths: dict, fixture: str, check: bool) -> int:
    """Prints each model's path and sha256; with check, 1 unless each equals the sha256 the
    fixture's model of that name was made from (else 0)."""
    want = {}
    if check:
        with open(fixture) as f:
            want = {n: m["sha256"] for n, m in json.load(f)["models"].items()}
    for name, p in paths.items():
        got = sha256(p)
        print(f"{p} {got}")
        if check and want.get(name) != got:
            print(f"error: {p} has sha256 {got}, but {fixture} was made from {want.get(name)}: "
                  "numpy or gguf wrote other bytes (regenerate the fixture with llama.cpp)", file=sys.stderr)
            return 1
    return 0


def no_extra_buffers():
    """Loads weights without llama.cpp's extra CPU buffer types (weight repacking, AMX): the plain
    ggml CPU kernels, the same on every machine. (The AMX path crashes on IQ4_XS here.)"""
    import llama_cpp.llama_cpp as C

    if getattr(C.llama_model_default_params, "specula_patched", False):
        return
    default = C.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    params.specula_patched = True
    C.llama_model_default_params = params


def greedy_and_teacher_forced(llm, prompts: list[list[int]], n_gen: int, probe: list[int],
                              stable_sort: bool = True) -> list[dict]:
    """Per prompt: {"prompt", "greedy" (n_gen ids), "positions" (teacher forced, one per token of
    prompt + greedy: argmax, top_ids, top_logits, probe_logits; logits rounded to 5 digits)}.
    `llm` is a llama_cpp.Llama made with logits_all=True."""
    cases = []
    for p in prompts:
        llm.reset()
        llm.eval(p)
        out = []
        for _ in range(n_gen):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            out.append(tok)
            llm.eval([tok])
        llm.reset()
        seq = p + out
        llm.eval(seq)
        rows = []
        for i in range(len(seq)):
            lg = np.asarray(llm.scores[i], dtype=np.float64)
            top = (np.argsort(-lg, kind="stable") if stable_sort else np.argsort(-lg))[:8]
            rows.append({"argmax": int(np.argmax(lg)), "top_ids": [int(t) for t in top],
                         "top_logits": [round(float(lg[t]), 5) for t in top],
                         "probe_logits": [round(float(lg[t]), 5) for t in probe]})
        cases.append({"prompt": p, "greedy": out, "positions": rows})
    return cases


def spec_oracle_binary() -> str:
    """tools/llama_spec_oracle.cpp built against tools/build_llama_server.sh's llama.cpp build tree (its
    static libraries; the build takes about 20 minutes the first time); returns its path."""
    import subprocess

    root = subprocess.run([os.path.join(HERE, "build_llama_server.sh"), "--print-bin-dir"], check=True,
                          capture_output=True, text=True).stdout.strip()
    root = os.path.dirname(root)
    subprocess.run([os.path.join(HERE, "build_llama_server.sh")], check=True)
    src, build = os.path.join(root, "src"), os.path.join(root, "build")
    subprocess.run(["cmake", "--build", build, "--target", "llama-common", "llama"], check=True)
    out = os.path.join(root, "bin", "llama_spec_oracle")
    libs = []
    for d, _, files in os.walk(build):
        libs += [os.path.join(d, f) for f in files if f.endswith(".a")]
    order = ["libllama-common", "libllama", "libggml", "libggml-cpu", "libggml-base"]
    libs.sort(key=lambda p: next((i for i, o in enumerate(order) if os.path.basename(p).startswith(o + ".")), 99))
    cmd = ["g++", "-std=c++17", "-O2", os.path.join(HERE, "llama_spec_oracle.cpp"), "-o", out,
           "-I" + os.path.join(src, "include"), "-I" + os.path.join(src, "common"),
           "-I" + os.path.join(src, "ggml", "include"), "-I" + os.path.join(src, "vendor"),
           "-Wl,--start-group", *libs, "-Wl,--end-group", "-fopenmp", "-lpthread", "-ldl"]
    subprocess.run(cmd, check=True)
    return out


def run_spec_oracle(binary: str, prompt: list, n_gen: int, depth: int, args: list) -> dict:
    """llama.cpp's greedy speculative run on prompt ids (tools/llama_spec_oracle.cpp): its JSON
    (prompt, tokens, and every draft with the context length it continued and the accepted count).
    args: the model and --spec-type flags; depth, no minimum draft, no p_min, f16 KV cache added."""
    import subprocess

    cmd = [binary, "--ids", ",".join(map(str, prompt)), "--n-gen", str(n_gen), *args, "--spec-draft-n-max", str(depth),
           "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-c", "256", "-b", "256", "-ub", "256", "-t", "2",
           "--temp", "0", "-ctk", "f16", "-ctv", "f16"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return json.loads([x for x in r.stdout.splitlines() if x.startswith("{")][-1])
