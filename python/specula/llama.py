"""specula.Llama — a drop-in for the most used calls of llama-cpp-python's `Llama`, over
specula's engine: code written against llama-cpp-python for these calls runs unchanged with
`from specula import Llama`.

  Llama(model_path, n_ctx=512, n_threads=None, seed=..., type_k=None, type_v=None,
        draft_model=None, embedding=False, verbose=True, ...)
  __call__ / create_completion(prompt, max_tokens=16, temperature=0.8, ...)
  create_chat_completion(messages, tools=None, tool_choice=None, response_format=None,
                         stream=False, logprobs=None, top_logprobs=None, ...)
  tokenize(text: bytes, add_bos=True, special=False) / detokenize(tokens, special=False)
  embed(input, normalize=False) / create_embedding(input)
  n_ctx() n_vocab() n_embd() token_bos() token_eos() metadata close() / with Llama(...)

Results are the OpenAI-shaped dicts llama-cpp-python returns (the server's answers: one
engine); streams are generators of chunk dicts. The sampling defaults are
llama-cpp-python's (create_completion: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05;
chat: temperature 0.2), so the same call samples from the same distribution.

Arguments llama-cpp-python takes for GPUs, memory mapping or batch sizes are accepted and
have nothing to do on specula's CPU engine; arguments whose feature specula does not have
(LoRA, rope overrides, logits processors, stopping criteria, infill suffix) raise
NotImplementedError when set; unknown keyword arguments raise TypeError. The GIL is
released while the engine works; Ctrl-C cancels the running call.
"""
from __future__ import annotations

import os
import random
from typing import Any, Dict, Iterator, List, Optional, Union

from ._core import ContextOverflow, InvalidArgument, Model

LLAMA_DEFAULT_SEED = 0xFFFFFFFF

# llama.cpp's ggml_type numbers (llama-cpp-python's GGML_TYPE_*) for type_k / type_v.
_GGML_KV_TYPES = {1: "f16", 8: "q8_0", 2: "q4_0"}

# Arguments of llama-cpp-python's constructor that mean nothing on specula's CPU engine.
_IGNORED = {
    "n_gpu_layers", "split_mode", "main_gpu", "tensor_split", "use_mmap", "use_mlock", "n_batch", "n_ubatch",
    "n_threads_batch", "offload_kqv", "flash_attn", "op_offload", "swa_full", "no_perf", "last_n_tokens_size",
    "numa", "logits_all", "chat_format", "attention_type", "spm_infill",
}
# ... and those whose feature specula lacks: allowed at their default only.
_UNSUPPORTED = {
    "vocab_only": False, "kv_overrides": None, "rope_scaling_type": -1, "rope_freq_base": 0.0,
    "rope_freq_scale": 0.0, "yarn_ext_factor": -1.0, "yarn_attn_factor": 1.0, "yarn_beta_fast": 32.0,
    "yarn_beta_slow": 1.0, "yarn_orig_ctx": 0, "lora_base": None,
    "chat_handler": None, "tokenizer": None,
}


class Llama:
    def __init__(self, model_path: str, *, seed: int = LLAMA_DEFAULT_SEED, n_ctx: int = 512,
                 n_threads: Optional[int] = None, embedding: bool = False, type_k: Optional[Union[int, str]] = None,
                 type_v: Optional[Union[int, str]] = None, draft_model: Any = None, verbose: bool = True,
                 n_parallel: int = 1, chat_template: Optional[str] = None, lora_path: Optional[str] = None,
                 lora_scale: float = 1.0, **kwargs: Any):
        """n_ctx: tokens one request may hold (0: the model's training context).
        lora_path / lora_scale: a LoRA adapter (GGUF LoRA file, or also a PEFT folder) applied to
        every call at lora_scale, without merging (as llama-cpp-python; more adapters:
        self.lora_load).
        specula's own arguments: n_parallel (calls from several threads decoded together),
        chat_template (a Jinja template replacing the model's), and any field of
        specula_model_params by name (cache_ram_mib, cache_dir, spec_depth, ...)."""
        from ._lib import ModelParams
        extra: Dict[str, Any] = {}
        for k, v in kwargs.items():
            if k in _IGNORED:
                continue
            if k in _UNSUPPORTED:
                if v != _UNSUPPORTED[k] and not (k == "rope_scaling_type" and v in (None, -1)):
                    raise NotImplementedError(f"Llama({k}=...): specula does not implement this yet")
                continue
            if k == "pooling_type":  # llama.cpp's LLAMA_POOLING_TYPE_*: -1 the model's, 1 mean, 3 last
                if v not in (None, -1, 1, 3):
                    raise NotImplementedError(f"Llama(pooling_type={v}): specula pools by mean (1) or last (3)")
                if v in (1, 3):
                    extra["pooling"] = "mean" if v == 1 else "last"
                continue
            if k in dict(ModelParams._fields_) and k != "struct_size":
                extra[k] = v
                continue
            raise TypeError(f"Llama() got an unexpected keyword argument '{k}'")
        if not isinstance(n_ctx, int) or n_ctx < 0:
            raise ValueError(f"n_ctx must be an int >= 0, got {n_ctx!r}")
        if not isinstance(n_parallel, int) or n_parallel < 1:
            raise ValueError(f"n_parallel must be an int >= 1, got {n_parallel!r}")
        self.model_path = os.fspath(model_path) if isinstance(model_path, os.PathLike) else model_path
        self.verbose = verbose
        self._embedding = embedding
        self._seed = seed or LLAMA_DEFAULT_SEED
        params: Dict[str, Any] = dict(extra)
        params["n_threads"] = 0 if n_threads is None or n_threads <= 0 else n_threads
        params["n_parallel"] = n_parallel
        params["n_ctx"] = n_ctx * n_parallel if n_ctx > 0 else -1  # 0: the model's training context
        params["cache_type_k"] = _kv_type(type_k, "type_k")
        params["cache_type_v"] = _kv_type(type_v, "type_v")
        if chat_template is not None:
            params["chat_template"] = chat_template
        if draft_model is not None:
            params.update(_draft(draft_model))
        self._model = Model(self.model_path, **params)
        if lora_path is not None:
            try:
                self._model.lora_load(os.fspath(lora_path), None, lora_scale)
            except Exception:
                self._model.close()
                raise
        self.metadata: Dict[str, str] = self._model.info().get("metadata", {})

    # -- LoRA adapters (specula's; llama-cpp-python loads one at construction) ------------
    def lora_load(self, path: str, name: Optional[str] = None, scale: float = 0.0) -> int:
        """Loads another adapter (GGUF LoRA file or PEFT folder); returns its id. scale: its
        global scale, with which every call runs (0: off; specula.Engine's calls can select
        adapters per request: {"model": name} or {"lora": [{"id": id, "scale": s}]})."""
        return self._model.lora_load(os.fspath(path), name, scale)

    def lora_unload(self, name: str) -> None:
        self._model.lora_unload(name)

    def lora_adapters(self) -> List[Dict[str, Any]]:
        """[{"id", "name", "path", "scale"}]."""
        return self._model.lora_list()

    # -- the model ------------------------------------------------------------------
    def n_ctx(self) -> int:
        return self._model.n_ctx()

    def n_vocab(self) -> int:
        return self._model.n_vocab()

    def n_embd(self) -> int:
        return self._model.n_embd()

    def token_bos(self) -> int:
        return self._model.token_bos()

    def token_eos(self) -> int:
        return self._model.token_eos()

    def set_seed(self, seed: int) -> None:
        self._seed = seed

    def close(self) -> None:
        self._model.close()

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- tokens ---------------------------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        return self._model.tokenize(text, add_bos, special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None, special: bool = False) -> bytes:
        """As llama-cpp-python's: the tokens' pieces (control tokens' text with special),
        one leading space dropped when the first token is BOS; prev_tokens is accepted and,
        as there, not used."""
        if isinstance(tokens, (str, bytes)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise TypeError("tokens must be a list of token ids")
        out = b"".join(self._model.token_to_piece(t, special) for t in tokens)
        if tokens and tokens[0] == self.token_bos() and out[:1] == b" ":
            out = out[1:]
        return out

    # -- generation -----------------------------------------------------------------
    def __call__(self, prompt: Union[str, List[int]], *args: Any, **kwargs: Any):
        return self.create_completion(prompt, *args, **kwargs)

    def create_completion(self, prompt: Union[str, List[int]], suffix: Optional[str] = None,
                          max_tokens: Optional[int] = 16, temperature: float = 0.8, top_p: float = 0.95,
                          min_p: float = 0.05, typical_p: float = 1.0, logprobs: Optional[int] = None,
                          echo: bool = False, stop: Optional[Union[str, List[str]]] = [],  # noqa: B006
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: Optional[int] = None, tfs_z: float = 1.0,
                          mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                          model: Optional[str] = None, stopping_criteria: Any = None, logits_processor: Any = None,
                          grammar: Any = None, logit_bias: Optional[Dict[int, float]] = None):
        if suffix is not None:
            raise NotImplementedError("create_completion(suffix=...): infill is not implemented in specula yet")
        _refuse(stopping_criteria=stopping_criteria, logits_processor=logits_processor)
        if isinstance(prompt, (bytes, bytearray)):
            prompt = prompt.decode("utf-8")
        if not isinstance(prompt, (str, list)):
            raise TypeError(f"prompt must be a str or a list of token ids, not {type(prompt).__name__}")
        n_prompt = len(prompt) if isinstance(prompt, list) else len(self._model.tokenize(prompt.encode("utf-8"), True, True))
        max_tokens = self._fit(n_prompt, max_tokens)
        body: Dict[str, Any] = {"prompt": prompt, "echo": echo}
        body.update(self._sampling(max_tokens, temperature, top_p, min_p, typical_p, stop, frequency_penalty,
                                   presence_penalty, repeat_penalty, top_k, seed, tfs_z, mirostat_mode, mirostat_tau,
                                   mirostat_eta, grammar, logit_bias))
        if logprobs is not None:
            body["logprobs"] = logprobs
        return self._run("/v1/completions", body, stream, model)

    def create_chat_completion(self, messages: List[Dict[str, Any]], functions: Optional[List[Dict]] = None,
                               function_call: Any = None, tools: Optional[List[Dict]] = None, tool_choice: Any = None,
                               temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05,
                               typical_p: float = 1.0, stream: bool = False,
                               stop: Optional[Union[str, List[str]]] = [],  # noqa: B006
                               seed: Optional[int] = None, response_format: Optional[Dict] = None,
                               max_tokens: Optional[int] = None, presence_penalty: float = 0.0,
                               frequency_penalty: float = 0.0, repeat_penalty: float = 1.0, tfs_z: float = 1.0,
                               mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                               model: Optional[str] = None, logits_processor: Any = None, grammar: Any = None,
                               logit_bias: Optional[Dict[int, float]] = None, logprobs: Optional[bool] = None,
                               top_logprobs: Optional[int] = None):
        _refuse(logits_processor=logits_processor)
        if not isinstance(messages, list):
            raise TypeError(f"messages must be a list of dicts, not {type(messages).__name__}")
        if functions is not None:  # the older OpenAI spelling of tools
            tools = (tools or []) + [{"type": "function", "function": f} for f in functions]
            if isinstance(function_call, dict):
                tool_choice = {"type": "function", "function": function_call}
            elif function_call in ("auto", "none"):
                tool_choice = function_call
        if max_tokens is not None and max_tokens > 0:
            try:
                ids = self._model.apply_chat_template(messages, tools if tool_choice != "none" else None)[1]
            except Exception:  # noqa: BLE001 — the request itself will say what is wrong
                ids = None
            if ids is not None:
                max_tokens = self._fit(len(ids), max_tokens)
        body: Dict[str, Any] = {"messages": messages}
        if tools is not None:
            body["tools"] = tools
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        if response_format is not None:
            body["response_format"] = response_format
        body.update(self._sampling(max_tokens, temperature, top_p, min_p, typical_p, stop, frequency_penalty,
                                   presence_penalty, repeat_penalty, top_k, seed, tfs_z, mirostat_mode, mirostat_tau,
                                   mirostat_eta, grammar, logit_bias))
        if logprobs:
            body["logprobs"] = True
            if top_logprobs is not None:
                body["top_logprobs"] = top_logprobs
        return self._run("/v1/chat/completions", body, stream, model)

    # -- embeddings -----------------------------------------------------------------
    def embed(self, input: Union[str, List[str]], normalize: bool = False, truncate: bool = True,
              return_count: bool = False):
        if not self._embedding:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        single = isinstance(input, str)
        if not single and not (isinstance(input, list) and all(isinstance(s, str) for s in input)):
            raise TypeError("input must be a str or a list of str")
        answer = self._model.call("POST", "/v1/embeddings",
                                  {"input": [input] if single else input, "normalize": bool(normalize)}).whole()
        vectors = [d["embedding"] for d in answer["data"]]
        out = vectors[0] if single else vectors
        if return_count:
            return out, answer["usage"]["prompt_tokens"]
        return out

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> Dict[str, Any]:
        vectors, n = self.embed(input, return_count=True)
        if isinstance(input, str):
            vectors = [vectors]
        return {"object": "list", "data": [{"object": "embedding", "embedding": v, "index": i}
                                           for i, v in enumerate(vectors)],
                "model": model if model is not None else self.model_path,
                "usage": {"prompt_tokens": n, "total_tokens": n}}

    # -- helpers --------------------------------------------------------------------
    def _fit(self, n_prompt: int, max_tokens: Optional[int]) -> Optional[int]:
        """As llama-cpp-python: a prompt that fills the context is an error; max_tokens is cut
        to what is left of it."""
        n_ctx = self.n_ctx()
        if n_prompt >= n_ctx:
            raise ContextOverflow(f"Requested tokens ({n_prompt}) exceed context window of {n_ctx}",
                                  "context_overflow", "prompt")
        if max_tokens is None or max_tokens <= 0:
            return None
        return min(max_tokens, n_ctx - n_prompt)

    def _sampling(self, max_tokens, temperature, top_p, min_p, typical_p, stop, frequency_penalty, presence_penalty,
                  repeat_penalty, top_k, seed, tfs_z, mirostat_mode, mirostat_tau, mirostat_eta, grammar,
                  logit_bias) -> Dict[str, Any]:
        if tfs_z != 1.0:
            raise NotImplementedError("tfs_z: tail-free sampling was removed from llama.cpp and is not in specula")
        b: Dict[str, Any] = {"temperature": temperature, "top_p": top_p, "min_p": min_p, "top_k": top_k,
                             "frequency_penalty": frequency_penalty, "presence_penalty": presence_penalty,
                             "repeat_penalty": repeat_penalty}
        if max_tokens is not None and max_tokens > 0:
            b["max_tokens"] = max_tokens
        if typical_p != 1.0:
            b["typical_p"] = typical_p
        if mirostat_mode:
            b.update({"mirostat": mirostat_mode, "mirostat_tau": mirostat_tau, "mirostat_eta": mirostat_eta})
        if stop:
            b["stop"] = [stop] if isinstance(stop, str) else list(stop)
        # As llama-cpp-python: a call's seed becomes the model's; without one, the next seed
        # is drawn from the model's (so a run of calls is reproducible from the constructor's).
        self._seed = seed if seed is not None else random.Random(self._seed).randint(0, 2**32)
        b["seed"] = self._seed
        if grammar is not None:
            if isinstance(grammar, str):
                b["grammar"] = grammar
            elif hasattr(grammar, "request_fields"):
                b.update(grammar.request_fields())
            else:
                raise TypeError("grammar must be a LlamaGrammar or a GBNF string")
        if logit_bias:
            b["logit_bias"] = {str(int(k)): float(v) for k, v in logit_bias.items()}
        return b

    def _run(self, path: str, body: Dict[str, Any], stream: bool, model: Optional[str]):
        name = model if model is not None else self.model_path
        if stream:
            body["stream"] = True
            return self._stream(path, body, name)
        answer = self._model.call("POST", path, body).whole()
        answer["model"] = name
        return answer

    def _stream(self, path: str, body: Dict[str, Any], name: str) -> Iterator[Dict[str, Any]]:
        # The call starts at the first next(), as llama-cpp-python's generator starts its
        # work on first use: errors in the request raise on the first iteration.
        call = self._model.call("POST", path, body)
        for chunk in call.stream():
            if "model" in chunk:
                chunk["model"] = name
            yield chunk


def _kv_type(t: Optional[Union[int, str]], name: str) -> Optional[str]:
    if t is None or isinstance(t, str):
        return t
    if isinstance(t, int) and t in _GGML_KV_TYPES:
        return _GGML_KV_TYPES[t]
    raise InvalidArgument(f"{name}={t!r}: specula's KV caches are f16 (1), q8_0 (8), q4_0 (2), or by name "
                          "(\"tq4\", ...)", "invalid_argument", name)


def _draft(d: Any) -> Dict[str, Any]:
    """llama-cpp-python's draft_model: a LlamaPromptLookupDecoding (n-gram lookup), or a path
    to a draft model (specula)."""
    if isinstance(d, (str, os.PathLike)):
        return {"draft_model": os.fspath(d), "spec": "draft"}
    if type(d).__name__ == "LlamaPromptLookupDecoding":
        depth = int(getattr(d, "num_pred_tokens", 10))
        return {"spec": "ngram", "spec_depth": max(1, min(32, depth))}
    raise TypeError("draft_model must be a LlamaPromptLookupDecoding or the path of a draft model")


def _refuse(**callbacks: Any) -> None:
    for k, v in callbacks.items():
        if v is not None:
            raise NotImplementedError(f"{k}: Python callbacks in the sampling loop are not supported by specula")
