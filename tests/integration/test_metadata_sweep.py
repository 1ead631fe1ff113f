"""tests/integration/test_metadata_sweep.py — nonsense model metadata fails at load, naming
the key, or the model still runs correctly; never garbage output.

For each real model found (Gemma 3 270M always, the CI model; Qwen2.5-Coder 0.5B when
pulled), a copy of the GGUF file gets each scalar metadata value of the architecture's
hyperparameters (`<arch>.*`), every bool key and the tokenizer's special token ids replaced
in place by boundary values — integers 0, 2^31, 2^32-1 (and -1, 2^63, 2^64-1 for 64-bit
types), floats 0, -1, NaN, +-inf, 2^31, 2^32-1, 2^63, bool bytes 2 and 255 (token ids: the
out-of-range ones only; 0 is a valid id) — and `specula generate` (greedy, 8 tokens) runs
on it. Each case must end in a non-zero exit whose message names the key, or exit 0 with
exactly the unmutated model's text (values the loader accepts — e.g. rope.freq_base 2^31,
inside its (1, 1e12] — must not change these 8 greedy tokens of a 6-token prompt; they do
not, and a change would be worth a look). Values are written with the `gguf` package's reader in
r+ mode (the file layout does not change) and restored after each case.
Env: SPECULA_SWEEP_MODELS (comma-separated paths) overrides the model list.
Exit 0 pass, 1 fail, 77 skip (no model or no `gguf` module).
"""

import math
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402

try:
    import gguf
    import numpy as np
except ImportError:
    ss.skip("the gguf/numpy modules are not installed")

PROMPT = "def fibonacci(n):"
VT = gguf.GGUFValueType
INT_VALUES = {
    VT.UINT8: [0, 2**7, 2**8 - 1], VT.INT8: [0, -1, -2**7],
    VT.UINT16: [0, 2**15, 2**16 - 1], VT.INT16: [0, -1, -2**15],
    VT.UINT32: [0, 2**31, 2**32 - 1], VT.INT32: [0, -1, -2**31, 2**31 - 1],
    VT.UINT64: [0, 2**31, 2**32 - 1, 2**63, 2**64 - 1], VT.INT64: [0, -1, 2**31, 2**32 - 1, -2**63, 2**63 - 1],
}
FLOAT_VALUES = [0.0, -1.0, math.nan, math.inf, -math.inf, 2.0**31, 2.0**32 - 1, 2.0**63]
TOKEN_ID_KEYS = ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                 "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.eom_token_id")


def models():
    env = os.environ.get("SPECULA_SWEEP_MODELS")
    if env:
        return [p for p in env.split(",") if p]
    d = os.environ.get("SPECULA_MODELS") or os.path.expanduser("~/.cache/specula/models")
    names = ["gemma-3-270m-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"]
    return [os.path.join(d, n) for n in names if os.path.exists(os.path.join(d, n))]


def generate(cli, path):
    cmd = [cli, "generate", "-m", path, "-p", PROMPT, "-n", "8", "--greedy", "-t", "2", "-c", "256"]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        return -1, "", "timed out after 120 s"
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def cases(reader):
    arch = reader.fields["general.architecture"]
    arch = bytes(arch.parts[arch.data[0]]).decode()
    for key, f in reader.fields.items():
        if len(f.types) != 1 or f.types[0] in (VT.STRING, VT.ARRAY):
            continue
        t = f.types[0]
        if t == VT.BOOL:
            yield key, f, [2, 255]
        elif key.startswith(arch + "."):
            yield key, f, FLOAT_VALUES if t in (VT.FLOAT32, VT.FLOAT64) else INT_VALUES[t]
        elif key in TOKEN_ID_KEYS:
            yield key, f, [v for v in INT_VALUES[t] if v != 0]


def store(part, value):
    """Writes value into the 1-element memmapped part with its dtype's bit pattern."""
    dt = part.dtype
    if dt.kind == "b" or (dt.kind == "u" and dt.itemsize == 1 and isinstance(value, int)):
        part.view(np.uint8)[0] = value
    elif dt.kind in "ui":
        part.view(np.dtype(f"u{dt.itemsize}"))[0] = value % (1 << (8 * dt.itemsize))
    else:
        part[0] = value


def sweep(cli, model):
    tmp = tempfile.mkdtemp(prefix="specula_sweep_")
    failures = []
    n = 0
    try:
        path = os.path.join(tmp, os.path.basename(model))
        shutil.copyfile(model, path)
        rc, base, err = generate(cli, path)
        ss.check(rc == 0 and base, f"{model}: the unmutated copy must run (rc {rc}): {err[-400:]}")
        reader = gguf.GGUFReader(path, "r+")
        for key, f, values in list(cases(reader)):
            part = f.parts[f.data[0]]
            original = part.copy()
            for value in values:
                store(part, value)
                reader.data.flush()
                rc, out, err = generate(cli, path)
                n += 1
                if rc == 0:
                    ok = out == base
                    what = "ran" + ("" if ok else f" with different text {out!r} (unmutated: {base!r})")
                else:
                    ok = key in err and "Sanitizer" not in err and rc > 0
                    what = f"exit {rc}: {err.strip().splitlines()[-1] if err.strip() else '(no message)'}"
                print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(model)} {key} = {value!r}: {what}", flush=True)
                if not ok:
                    failures.append(f"{key} = {value!r}: {what}")
            part[...] = original
            reader.data.flush()
        rc, out, _ = generate(cli, path)
        ss.check(rc == 0 and out == base, "restoring every value must give the unmutated text back")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return n, failures


def main():
    found = models()
    if not found:
        ss.skip("no model in the model cache")
    cli = ss.cli_path()
    total, failures = 0, []
    for m in found:
        n, f = sweep(cli, m)
        total += n
        failures += [f"{os.path.basename(m)}: {x}" for x in f]
    ss.check(not failures, f"{len(failures)} of {total} mutated files misbehaved:\n" + "\n".join(failures))
    return f"{total} mutated files over {len(found)} model(s): each failed naming its key or ran unchanged"


if __name__ == "__main__":
    ss.run_main("test_metadata_sweep", main)
