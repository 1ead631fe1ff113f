"""The package as `pip install ./python` installed it (site-packages, its own libspecula.so),
not this tree's sources: it imports, says its version and CPU, and tokenizes with a model.
Exit 77 (skipped) when it is not installed or the model is missing."""
import os
import sys

sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.pop("SPECULA_LIBRARY", None)
try:
    import specula
except ImportError as e:
    print(f"skip: the specula package is not installed ({e})")
    sys.exit(77)

lib_dir = os.path.dirname(specula.__file__)
assert os.path.exists(os.path.join(lib_dir, "libspecula.so")), lib_dir
assert "site-packages" in lib_dir or "dist-packages" in lib_dir, lib_dir
model = os.path.join(os.environ.get("SPECULA_MODELS", os.path.expanduser("~/.cache/specula/models")),
                     "gemma-3-270m-q4_k_m.gguf")
if not os.path.exists(model):
    print("skip: no model")
    sys.exit(77)
llm = specula.Llama(model, n_ctx=256, verbose=False)
ids = llm.tokenize(b"Hello world")
text = llm.detokenize(ids).decode()
assert text.strip() == "Hello world", text
out = llm("The capital of France is", max_tokens=4, temperature=0)
assert out["choices"][0]["finish_reason"] in ("length", "stop")
llm.close()
print(f"PASS installed specula {specula.__version__} at {lib_dir}: {specula.system_info()}")
