"""specula.Engine — the native, concurrent API: one model, many requests at once, batched
by the engine (continuous batching, speculative decoding, prompt cache), each a stream of
token events.

    engine = Engine("model.gguf", n_parallel=8, n_ctx=8192)
    req = engine.submit("Once upon a time", max_tokens=64, temperature=0)   # from any thread
    for ev in req:                      # TokenEvent(tokens, text, logprobs)
        print(ev.text, end="")
    print(req.result().finish_reason)   # Completion(text, tokens, finish_reason, usage ...)

    async for ev in engine.submit(messages=[...]):   # asyncio: the wait runs off the loop
        ...

A request's tokens are the same whatever else runs (batch invariance). cancel() frees the
request's row within two engine steps; so do breaking out of the iteration (for an
abandoned iterator, when it is garbage collected) and Ctrl-C while waiting.
"""
from __future__ import annotations

import asyncio
import ctypes
import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Sequence, Union

from . import _lib
from ._core import POLL_MS, Model, SpeculaError, raise_status
from ._lib import lib


@dataclass
class TokenEvent:
    """What a request produced since its previous event."""
    tokens: List[int]            # generated token ids (the end-of-generation token not included)
    text: str                    # text released (a stop string's possible start is held back)
    logprobs: Optional[List[float]] = None  # the tokens' logprobs, when asked for


@dataclass
class Completion:
    """How a request ended."""
    text: str
    tokens: List[int]
    finish_reason: str           # "stop", "length", "cancelled", "failed"
    stop_sequence: Optional[str]
    error: Optional[str]
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int       # sampled tokens, an end-of-generation token included
    seed: int
    queue_seconds: float
    prefill_seconds: float
    decode_seconds: float
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    logprobs: Optional[List[float]] = field(default=None)


class Request:
    """A running request: iterate it (or `async for`) for TokenEvents; result() waits for the
    end. One consumer at a time; cancel() from anywhere."""

    def __init__(self, ptr: ctypes.c_void_p, model: Model):
        self._ptr = ptr
        self._model = model  # kept: a model collected while its requests run would cancel them
        self._lock = threading.Lock()         # one consumer polls at a time
        self._handle_lock = threading.Lock()  # cancel() against close() freeing the handle
        self._upd = _lib.RequestUpdate()
        self._upd.struct_size = ctypes.sizeof(_lib.RequestUpdate)
        self._text: List[str] = []
        self._tokens: List[int] = []
        self._logprobs: Optional[List[float]] = None
        self._done: Optional[Completion] = None

    # The next event with something in it, or None once finished.
    def _next(self) -> Optional[TokenEvent]:
        while self._done is None:
            ev = self._poll()
            if ev is not None and (ev.tokens or ev.text):
                return ev
        return None

    # One update (possibly empty: the end), or None when the request already ended.
    def _poll(self) -> Optional[TokenEvent]:
        with self._lock:
            if self._done is not None:
                return None
            if self._ptr is None:
                raise SpeculaError("the request was closed", "unavailable")
            try:
                while True:
                    st = lib.specula_request_next(self._ptr, POLL_MS, ctypes.byref(self._upd))
                    if st == _lib.ERR_TIMEOUT:
                        continue
                    if st != _lib.OK:
                        raise_status(st)
                    break
            except BaseException:  # Ctrl-C: the request goes, its row with it
                lib.specula_request_cancel(self._ptr)
                raise
            u = self._upd
            tokens = [u.tokens[i] for i in range(u.n_tokens)]
            lps = [u.logprobs[i] for i in range(u.n_tokens)] if u.logprobs else None
            text = ctypes.string_at(u.text, u.text_len).decode("utf-8", "replace") if u.text_len else ""
            self._text.append(text)
            self._tokens.extend(tokens)
            if lps is not None:
                self._logprobs = (self._logprobs or []) + lps
            if u.finished:
                self._done = Completion(
                    text="".join(self._text), tokens=list(self._tokens), finish_reason=u.finish_reason.decode(),
                    stop_sequence=u.stop_sequence.decode() if u.stop_sequence else None,
                    error=u.error.decode("utf-8", "replace") if u.error else None, prompt_tokens=u.n_prompt_tokens,
                    cached_tokens=u.n_cached_tokens, completion_tokens=u.n_generated_tokens, seed=u.seed,
                    queue_seconds=u.queue_seconds, prefill_seconds=u.prefill_seconds,
                    decode_seconds=u.decode_seconds, drafted_tokens=u.drafted_tokens,
                    accepted_tokens=u.accepted_tokens, logprobs=self._logprobs)
            return TokenEvent(tokens, text, lps)

    def __iter__(self) -> Iterator[TokenEvent]:
        try:
            while True:
                ev = self._next()
                if ev is None:
                    return
                yield ev
        finally:
            if self._done is None:  # the consumer left early: the request goes
                self.cancel()

    async def _anext(self) -> Optional[TokenEvent]:
        return await asyncio.get_running_loop().run_in_executor(None, self._next)

    def __aiter__(self) -> AsyncIterator[TokenEvent]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[TokenEvent]:
        try:
            while True:
                ev = await self._anext()
                if ev is None:
                    return
                yield ev
        finally:
            if self._done is None:
                self.cancel()

    def result(self) -> Completion:
        """Waits for the end (consuming the events nobody read) and returns how it ended."""
        while self._next() is not None:
            pass
        assert self._done is not None
        return self._done

    async def aresult(self) -> Completion:
        while await self._anext() is not None:
            pass
        assert self._done is not None
        return self._done

    @property
    def done(self) -> bool:
        return self._done is not None

    def cancel(self) -> None:
        """Stops the request (thread-safe, idempotent); its row is freed at the next step."""
        with self._handle_lock:
            if self._ptr is not None:
                lib.specula_request_cancel(self._ptr)

    def close(self) -> None:
        """Cancels the request if it runs and frees its handle."""
        self.cancel()
        with self._lock, self._handle_lock:
            if self._ptr is not None:
                lib.specula_request_free(self._ptr)
                self._ptr = None

    def __del__(self):
        try:
            if self._ptr is not None:
                lib.specula_request_free(self._ptr)
                self._ptr = None
        except Exception:  # noqa: BLE001
            pass


def _floatish(v: Optional[float], name: str) -> float:
    if v is None:
        return math.nan
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise TypeError(f"{name} must be a number, not {type(v).__name__}")
    return float(v)


def _intish(v: Optional[int], name: str, unset: int = -1) -> int:
    if v is None:
        return unset
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    return v


class Engine:
    """A model and its engine. Arguments: specula_model_params by name (n_parallel,
    n_ctx, n_threads, cache_type_k/v, spec, draft_model, spec_depth,
    cache_ram_mib, cache_dir, chat_template, chat_template_file, ...)."""

    def __init__(self, model_path: str, *, n_ctx: int = 0, n_parallel: int = 4, **params: Any):
        """n_ctx: the tokens all running requests hold together, as llama-server's -c (one
        request may use all of it, up to the model's training context); 0: 4096 per row."""
        if not isinstance(n_parallel, int) or isinstance(n_parallel, bool) or n_parallel < 1:
            raise ValueError(f"n_parallel must be an int >= 1, got {n_parallel!r}")
        if not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or n_ctx < 0:
            raise ValueError(f"n_ctx must be an int >= 0, got {n_ctx!r}")
        self.model = Model(model_path, n_parallel=n_parallel, n_ctx=n_ctx, **params)

    def submit(self, prompt: Union[str, Sequence[int], None] = None, *, messages: Optional[List[Dict]] = None,
               tools: Optional[List[Dict]] = None, max_tokens: Optional[int] = None,
               temperature: Optional[float] = None, top_p: Optional[float] = None, top_k: Optional[int] = None,
               min_p: Optional[float] = None, repeat_penalty: Optional[float] = None,
               presence_penalty: Optional[float] = None, frequency_penalty: Optional[float] = None,
               seed: Optional[int] = None, stop: Union[str, Sequence[str], None] = None,
               logprobs: Optional[int] = None, ignore_eos: bool = False, speculative: bool = True,
               parse_special: bool = True, grammar: Optional[str] = None, json_schema: Optional[Dict] = None,
               regex: Optional[str] = None, options: Optional[Dict[str, Any]] = None) -> Request:
        """Queues a request: a prompt (text, or token ids used as given) or chat messages.
        Unset sampling fields take the model's defaults; `options` holds any other field of
        the API's request body (docs/API.md). Errors raise before anything is queued."""
        p = _lib.RequestParams()
        lib.specula_request_default_params(ctypes.byref(p))
        keep: List[Any] = []

        def s(v: Optional[str]) -> Optional[bytes]:
            if v is None:
                return None
            b = v.encode("utf-8")
            keep.append(b)
            return b

        if (prompt is None) == (messages is None):
            raise ValueError("give a prompt or messages (one of them)")
        if isinstance(prompt, str):
            p.prompt = s(prompt)
        elif prompt is not None:
            ids = [int(t) for t in prompt]
            arr = (ctypes.c_int32 * len(ids))(*ids)
            keep.append(arr)
            p.prompt_tokens = arr
            p.n_prompt_tokens = len(ids)
        if messages is not None:
            p.messages_json = s(json.dumps(messages))
        if tools is not None:
            p.tools_json = s(json.dumps(tools))
        p.max_tokens = _intish(max_tokens, "max_tokens")
        p.temperature = _floatish(temperature, "temperature")
        p.top_p = _floatish(top_p, "top_p")
        p.top_k = _intish(top_k, "top_k")
        p.min_p = _floatish(min_p, "min_p")
        p.repeat_penalty = _floatish(repeat_penalty, "repeat_penalty")
        p.presence_penalty = _floatish(presence_penalty, "presence_penalty")
        p.frequency_penalty = _floatish(frequency_penalty, "frequency_penalty")
        if seed is not None:
            p.has_seed = 1
            p.seed = _intish(seed, "seed") & (2**64 - 1)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if stops:
            arr = (ctypes.c_char_p * len(stops))(*[s(x) for x in stops])
            keep.append(arr)
            p.stop = arr
            p.n_stop = len(stops)
        p.logprobs = _intish(logprobs, "logprobs")
        p.ignore_eos = int(bool(ignore_eos))
        p.speculative = int(bool(speculative))
        p.parse_special = int(bool(parse_special))
        p.grammar = s(grammar)
        p.json_schema = s(None if json_schema is None else json.dumps(json_schema))
        p.regex = s(regex)
        p.options_json = s(None if options is None else json.dumps(options))
        ptr = ctypes.c_void_p()
        with self.model._lock:
            st = lib.specula_request_start(self.model._handle(), ctypes.byref(p), ctypes.byref(ptr))
        if st != _lib.OK:
            raise_status(st)
        return Request(ptr, self.model)

    def generate(self, prompt: Union[str, Sequence[int], None] = None, **kwargs: Any) -> Completion:
        """submit() and wait for the end."""
        return self.submit(prompt, **kwargs).result()

    async def agenerate(self, prompt: Union[str, Sequence[int], None] = None, **kwargs: Any) -> Completion:
        return await self.submit(prompt, **kwargs).aresult()

    def call(self, path: str, body: Optional[Dict[str, Any]] = None, method: str = "POST"):
        """An HTTP API route run in-process (docs/API.md): the answer as a dict, or, with
        "stream": true in the body, a generator of its events."""
        c = self.model.call(method, path, body)
        return c.stream() if body and body.get("stream") else c.whole()

    def tokenize(self, text: Union[str, bytes], add_special: bool = True, parse_special: bool = False) -> List[int]:
        """Token ids of text (str, or UTF-8 bytes)."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        if not isinstance(text, (bytes, bytearray)):
            raise TypeError(f"tokenize takes a str or bytes, not {type(text).__name__}")
        return self.model.tokenize(bytes(text), add_special, parse_special)

    def detokenize(self, tokens: Sequence[int], render_special: bool = False) -> str:
        return self.model.detokenize(list(tokens), False, render_special).decode("utf-8", "replace")

    def apply_chat_template(self, messages: List[Dict], tools: Optional[List[Dict]] = None) -> str:
        return self.model.apply_chat_template(messages, tools)[0]

    def embed(self, input: Union[str, List[str]], normalize: bool = True):
        single = isinstance(input, str)
        answer = self.call("/v1/embeddings", {"input": [input] if single else input, "normalize": normalize})
        vectors = [d["embedding"] for d in answer["data"]]
        return vectors[0] if single else vectors

    def lora_load(self, path: str, name: Optional[str] = None, scale: float = 0.0) -> int:
        """Loads a LoRA adapter (GGUF LoRA file or PEFT folder); returns its id. Requests
        select it by "model": name or "lora": [{"id": id, "scale": s}]; scale is its global
        scale (requests that select nothing run with the adapters whose scale is not 0)."""
        return self.model.lora_load(path, name, scale)

    def lora_unload(self, name: str) -> None:
        self.model.lora_unload(name)

    def lora_adapters(self) -> List[Dict[str, Any]]:
        return self.model.lora_list()

    def info(self) -> Dict[str, Any]:
        return self.model.info()

    def stats(self) -> Dict[str, Any]:
        """The engine's counters: running_rows, queue_depth, steps, finished, ..."""
        return self.model.stats()

    def close(self) -> None:
        """Cancels the running requests and frees the model once they are gone."""
        self.model.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
