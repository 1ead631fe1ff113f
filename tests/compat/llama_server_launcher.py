#!/usr/bin/env python3
"""llama_server_launcher.py — llama-server's command line, served by specula (or by the
native llama-server with the same local models).

llama.cpp's server test suite (tools/server/tests) starts `$LLAMA_SERVER_BIN_PATH` with
llama-server's flags and models named by Hugging Face repository. This launcher stands in
for that binary:

  * models: every `--hf-repo`/`--hf-file`/`--model` is mapped to a model in the local model
    cache (~/.cache/specula/models, or $SPECULA_MODELS): this machine reaches no model hub.
    The mapping is MODEL_MAP below; a repository it does not know fails to start, as a
    download would fail offline.
  * flags: llama-server's flags are translated to `specula serve`'s (FLAG_MAP); flags that
    change nothing specula does (GPU layers, flash attention, micro-batch sizes, --jinja, which
    specula always uses) are dropped; a flag for a feature specula lacks makes the launcher
    exit 2 naming it (the test then fails: it is counted, not hidden).
  * native mode: with $LLAMA_SERVER_NATIVE set to a llama-server binary the launcher runs it
    with the same model mapping and otherwise unchanged flags — the figure beside specula's.
    On a CPU with AMX it adds `--no-repack`: llama.cpp 0.3.36's repacking picks the AMX
    buffer type there and the server crashes (segmentation fault) while loading.

Run by tests/compat/run_llama_server_suite.sh; see docs/API.md ("llama-server drop-in").
"""
import os
import sys

MODELS = os.environ.get("SPECULA_MODELS", os.path.expanduser("~/.cache/specula/models"))
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"

# Hugging Face repository (":quant" removed) or file name -> local model file. The suite's
# tiny test models (stories260K, bert-bge-small, ...) are replaced by the small real models
# this machine has; tests that check those models' own text are model-specific and counted
# apart (the native llama-server runs on the same mapping).
MODEL_MAP = {
    "ggml-org/test-model-stories260K": QWEN,
    "ggml-org/test-model-stories260K-infill": QWEN,
    "ggml-org/stories15M_MOE": QWEN,
    "ggml-org/models": QWEN,  # bert-bge-small, tinyllamas/...: embeddings and text
    "ggml-org/tinygemma3-GGUF": GEMMA,
    "ggml-org/Qwen2.5-Coder-1.5B-IQ3_XXS-GGUF": QWEN,
    "stories15M-q4_0.gguf": QWEN,  # the speculative tests' draft model
}

# llama-server flag -> specula serve flag (same value).
FLAG_MAP = {
    "--port": "--port",
    "--host": "--host",
    "--alias": "--alias",
    "-a": "--alias",
    "--tags": "--tags",
    "--ctx-size": "--ctx",
    "-c": "--ctx",
    "--parallel": "--parallel",
    "-np": "--parallel",
    "--threads": "--threads",
    "-t": "--threads",
    "--api-key": "--api-key",
    "--pooling": "--pooling",
    "-ctk": "--cache-type-k",
    "--cache-type-k": "--cache-type-k",
    "-ctv": "--cache-type-v",
    "--cache-type-v": "--cache-type-v",
    "--chat-template": "--chat-template",
    "--chat-template-file": "--chat-template-file",
    "--n-predict": "--n-predict",
    "-n": "--n-predict",
    "--temp": "--temp",
    "--seed": "--seed",
    "--cors-origins": "--cors-origin",
    "--reasoning": "--reasoning",
    "--cache-ram": "--cache-ram",
    "--model-draft": "--draft-model",
    "-md": "--draft-model",
    # llama-server's logical batch is the most tokens one decode takes: specula's engine step.
    "--batch-size": "--step-tokens",
    "-b": "--step-tokens",
}
# Flags (with a value) that change nothing specula does.
IGNORED_WITH_VALUE = {"--ubatch-size", "-ub", "--n-gpu-layers", "-ngl", "-fa",
                      "--flash-attn", "--hf-token", "--grp-attn-n", "--grp-attn-w"}
# Flags without a value: specula flag, or None when it changes nothing.
SWITCHES = {
    "--no-ui": "--no-webui",
    "--no-webui": "--no-webui",
    "--slots": None,  # on by default
    "--no-slots": "--no-slots",
    "--metrics": None,  # on; without it --no-metrics (below), as llama-server's default
    "--embedding": None,  # embeddings are always served
    "--embeddings": None,
    "--cont-batching": None,  # always on
    "--jinja": None,  # specula always renders the model's Jinja template
    "--no-jinja": None,
    "--offline": None,
    "--kv-unified": None,  # specula's default; without it --kv-split (below), as llama-server's
    "--swa-full": None,
    "--verbose": "--verbose",  # "__verbose" in answers
    "--backend_sampling": None,  # where sampling runs changes no token
    "--no-mmproj": None,
}


def model_path(name):
    key = name.split(":")[0]
    local = MODEL_MAP.get(key) or MODEL_MAP.get(os.path.basename(key))
    if local is None:
        if os.path.exists(name):
            return name
        sys.exit(f"llama_server_launcher: no local model for '{name}' (offline; see MODEL_MAP)")
    return os.path.join(MODELS, local)


def main(argv):
    native = os.environ.get("LLAMA_SERVER_NATIVE")
    args, out, model = list(argv), [], None
    i = 0
    while i < len(args):
        a = args[i]
        value = args[i + 1] if i + 1 < len(args) else None
        if a in ("--hf-repo", "-hf", "-hfr", "--model", "-m", "--hf-file", "-hff"):
            if a in ("--hf-file", "-hff"):
                model = model_path(value)  # the file names the model more precisely
            elif model is None or a in ("--model", "-m"):
                model = model_path(value)
            i += 2
            continue
        if native:
            if a != "--offline":
                out.append(a)
            i += 1
            continue
        if a in FLAG_MAP:
            out += [FLAG_MAP[a], value]
            i += 2
        elif a in IGNORED_WITH_VALUE:
            i += 2
        elif a in SWITCHES:
            if SWITCHES[a]:
                out.append(SWITCHES[a])
            i += 1
        else:
            sys.exit(f"llama_server_launcher: specula has no equivalent of llama-server's '{a}'")
    if model is None:
        sys.exit("llama_server_launcher: no model (router mode, several models in one server, is not mapped)")
    if not native:
        if "--metrics" not in argv:
            out.append("--no-metrics")
        if "--kv-unified" not in argv and "-kvu" not in argv:
            out.append("--kv-split")
    if native:
        cmd = [native, "-m", model] + out
        if cpu_has_amx() and not any(a in ("--repack", "-nr", "--no-repack") for a in argv):
            cmd.append("--no-repack")
    else:
        binary = os.environ.get("SPECULA_BIN", "specula")
        cmd = [binary, "serve", "--model", model, "--log-requests", "0"] + out
    sys.stderr.write("llama_server_launcher: " + " ".join(cmd) + "\n")
    sys.stderr.flush()
    os.execvp(cmd[0], cmd)


def cpu_has_amx():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " amx_tile" in line for line in f)
    except OSError:
        return False


if __name__ == "__main__":
    main(sys.argv[1:])
