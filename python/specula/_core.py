"""specula._core — what Llama and Engine share: the model handle (open, close, the lock that
keeps a close from racing a call that starts), the errors, and the two ways of asking the
engine — a call (an HTTP route run in-process: JSON in, JSON out) and a typed request
(token ids, text and logprobs out) — both polled in short waits so that Ctrl-C lands
between them and cancels the work."""
from __future__ import annotations

import ctypes
import json
import os
import threading
from typing import Any, Iterator, Optional

from . import _lib
from ._lib import lib

POLL_MS = 100  # how long one wait in the engine lasts; Ctrl-C is noticed between waits


class SpeculaError(RuntimeError):
    """An error of the engine. `code` is the status name ("invalid_argument", "busy", ...),
    `param` the request field at fault when known, `http_status` the status the server
    would have answered with (calls)."""

    def __init__(self, message: str, code: str = "internal", param: Optional[str] = None,
                 http_status: Optional[int] = None):
        super().__init__(message)
        self.code = code
        self.param = param
        self.http_status = http_status


class InvalidArgument(SpeculaError, ValueError):
    """A parameter or request field is wrong (the message names it)."""


class ContextOverflow(InvalidArgument):
    """The prompt (+ max_tokens) does not fit the context."""


class NotFound(SpeculaError, LookupError):
    """A named thing does not exist (a route of a call, a file the parameters name)."""


class ModelNotFound(NotFound, ValueError):
    """No model file at that path (a ValueError, as llama-cpp-python raises)."""


class Unimplemented(SpeculaError, NotImplementedError):
    """A valid request (or file) for something specula does not implement (yet)."""


class Busy(SpeculaError):
    """The engine's queue is full; retry later."""


class Closed(SpeculaError):
    """The model was closed."""


_BY_STATUS = {
    _lib.ERR_INVALID_ARGUMENT: InvalidArgument,
    _lib.ERR_NOT_FOUND: ModelNotFound,
    _lib.ERR_CONTEXT_OVERFLOW: ContextOverflow,
    _lib.ERR_BUSY: Busy,
    _lib.ERR_UNAVAILABLE: Closed,
    _lib.ERR_UNIMPLEMENTED: Unimplemented,
}


def raise_status(status: int, what: str = "") -> None:
    msg = _lib.last_error()
    cls = _BY_STATUS.get(status, SpeculaError)
    raise cls(f"{what}: {msg}" if what else msg, _lib.status_name(status))


def raise_answer(http_status: int, body: bytes) -> None:
    """Raises the error an HTTP error answer says."""
    try:
        err = json.loads(body)
        e = err.get("error", err)
        message = e.get("message") if isinstance(e, dict) else str(e)
        param = e.get("param") if isinstance(e, dict) else None
        code = e.get("code") if isinstance(e, dict) else None
    except (ValueError, AttributeError):
        message, param, code = body.decode("utf-8", "replace"), None, None
    if http_status == 400 and code == "context_length_exceeded":
        cls = ContextOverflow
    elif http_status == 404:
        cls = NotFound
    elif http_status in (400, 405, 413, 422):
        cls = InvalidArgument
    elif http_status == 429:
        cls = Busy
    elif http_status == 503:
        cls = Closed
    else:
        cls = SpeculaError
    raise cls(message or f"HTTP {http_status}", code or "error", param, http_status)


def _bytes(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else os.fsencode(s) if isinstance(s, os.PathLike) else str(s).encode("utf-8")


class Model:
    """One loaded model and its engine (libspecula's specula_model)."""

    def __init__(self, path: str, **params: Any):
        path = os.fspath(path)
        if not isinstance(path, str):
            raise TypeError(f"model_path must be a str or os.PathLike, not {type(path).__name__}")
        if not os.path.exists(path):
            raise ModelNotFound(f"Model path does not exist: {path}", "not_found")
        p = _lib.ModelParams()
        lib.specula_model_default_params(ctypes.byref(p))
        keep = []  # the byte strings must outlive the call
        for k, v in params.items():
            if v is None:
                continue
            if k not in dict(_lib.ModelParams._fields_):
                raise TypeError(f"unknown model parameter '{k}'")
            if isinstance(v, (str, os.PathLike)):
                b = _bytes(v)
                keep.append(b)
                setattr(p, k, b)
            elif isinstance(v, bool):
                setattr(p, k, int(v))
            elif isinstance(v, int):
                setattr(p, k, v)
            else:
                raise TypeError(f"model parameter '{k}' must be an int or a str, not {type(v).__name__}")
        ptr = ctypes.c_void_p()
        st = lib.specula_model_load(path.encode(), ctypes.byref(p), ctypes.byref(ptr))
        if st != _lib.OK:
            raise_status(st, f"cannot load {path}")
        self._ptr = ptr
        self._lock = threading.Lock()
        self.path = path

    # The handle, or Closed. Callers that start work hold self._lock around the start.
    def _handle(self) -> ctypes.c_void_p:
        if self._ptr is None:
            raise Closed("the model is closed", "unavailable")
        return self._ptr

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        with self._lock:
            if self._ptr is not None:
                lib.specula_model_free(self._ptr)
                self._ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 — interpreter shutdown
            pass

    # Metadata.
    def n_ctx(self) -> int:
        with self._lock:
            return lib.specula_model_n_ctx(self._handle())

    def n_vocab(self) -> int:
        with self._lock:
            return lib.specula_model_n_vocab(self._handle())

    def n_embd(self) -> int:
        with self._lock:
            return lib.specula_model_n_embd(self._handle())

    def token_bos(self) -> int:
        with self._lock:
            return lib.specula_model_token_bos(self._handle())

    def token_eos(self) -> int:
        with self._lock:
            return lib.specula_model_token_eos(self._handle())

    def is_eog(self, token: int) -> bool:
        with self._lock:
            return bool(lib.specula_model_token_is_eog(self._handle(), int(token)))

    def model_id(self) -> str:
        with self._lock:
            return lib.specula_model_id(self._handle()).decode()

    def info(self) -> dict:
        out = ctypes.c_void_p()
        with self._lock:
            st = lib.specula_model_info_json(self._handle(), ctypes.byref(out))
        if st != _lib.OK:
            raise_status(st)
        return json.loads(_lib.take_string(out))

    def stats(self) -> dict:
        """The engine's counters (running_rows, queue_depth, steps, ...)."""
        out = ctypes.c_void_p()
        with self._lock:
            st = lib.specula_model_stats_json(self._handle(), ctypes.byref(out))
        if st != _lib.OK:
            raise_status(st)
        return json.loads(_lib.take_string(out))

    # LoRA adapters.
    def lora_load(self, path: str, name: Optional[str] = None, scale: float = 0.0) -> int:
        """Loads a GGUF LoRA file or PEFT folder; returns its id (specula_lora_load)."""
        out = ctypes.c_int64()
        with self._lock:
            st = lib.specula_lora_load(self._handle(), os.fsencode(path), name.encode() if name else None,
                                       float(scale), ctypes.byref(out))
        if st != _lib.OK:
            raise_status(st)
        return out.value

    def lora_unload(self, name: str) -> None:
        with self._lock:
            st = lib.specula_lora_unload(self._handle(), name.encode())
        if st != _lib.OK:
            raise_status(st)

    def lora_list(self) -> list:
        out = ctypes.c_void_p()
        with self._lock:
            st = lib.specula_lora_list_json(self._handle(), ctypes.byref(out))
        if st != _lib.OK:
            raise_status(st)
        return json.loads(_lib.take_string(out))

    # Tokens.
    def tokenize(self, text: bytes, add_special: bool, parse_special: bool) -> list[int]:
        if isinstance(text, str):
            raise TypeError("tokenize takes bytes (text.encode('utf-8')), as llama-cpp-python's")
        if not isinstance(text, (bytes, bytearray)):
            raise TypeError(f"tokenize takes bytes, not {type(text).__name__}")
        out = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        with self._lock:
            st = lib.specula_tokenize(self._handle(), bytes(text), len(text), int(add_special), int(parse_special),
                                      ctypes.byref(out), ctypes.byref(n))
        if st != _lib.OK:
            raise_status(st)
        return _lib.take_ids(out, n.value)

    def detokenize(self, tokens: list[int], remove_special: bool, render_special: bool) -> bytes:
        ids = _id_array(tokens)
        out = ctypes.c_void_p()
        n = ctypes.c_size_t()
        with self._lock:
            st = lib.specula_detokenize(self._handle(), ids, len(ids), int(remove_special), int(render_special),
                                        ctypes.byref(out), ctypes.byref(n))
        if st != _lib.OK:
            raise_status(st)
        return _lib.take_string(out, n.value)

    def token_to_piece(self, token: int, render_special: bool) -> bytes:
        out = ctypes.c_void_p()
        n = ctypes.c_size_t()
        with self._lock:
            st = lib.specula_token_to_piece(self._handle(), int(token), int(render_special), ctypes.byref(out),
                                            ctypes.byref(n))
        if st != _lib.OK:
            raise_status(st)
        return _lib.take_string(out, n.value)

    def apply_chat_template(self, messages: list, tools: Optional[list] = None) -> tuple[str, list[int]]:
        text = ctypes.c_void_p()
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        with self._lock:
            st = lib.specula_apply_chat_template(self._handle(), _dumps(messages, "messages"),
                                                 None if tools is None else _dumps(tools, "tools"), ctypes.byref(text),
                                                 ctypes.byref(ids), ctypes.byref(n))
        if st != _lib.OK:
            raise_status(st)
        return _lib.take_string(text).decode("utf-8", "replace"), _lib.take_ids(ids, n.value)

    # Calls: an HTTP route in-process.
    def call(self, method: str, path: str, body: Optional[dict]) -> "Call":
        data = None if body is None else _dumps(body, "the request")
        ptr = ctypes.c_void_p()
        with self._lock:
            st = lib.specula_call_start(self._handle(), method.encode(), path.encode(), data,
                                        0 if data is None else len(data), ctypes.byref(ptr))
        if st != _lib.OK:
            raise_status(st)
        return Call(ptr, self)


def _dumps(obj: Any, what: str) -> bytes:
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} cannot be sent as JSON: {e}") from None


def _id_array(tokens) -> ctypes.Array:
    try:
        ids = [int(t) for t in tokens]
    except (TypeError, ValueError):
        raise TypeError("tokens must be a sequence of ints") from None
    for t in ids:
        if not -2**31 <= t < 2**31:
            raise ValueError(f"token id {t} is outside the vocabulary")
    return (ctypes.c_int32 * len(ids))(*ids)


class Call:
    """A running route: its events, polled; cancel() is the client hanging up."""

    def __init__(self, ptr: ctypes.c_void_p, model: "Model"):
        self._ptr = ptr
        self._model = model  # a model collected while its calls run would cancel them
        self._ev = _lib.CallEvent()
        self._ev.struct_size = ctypes.sizeof(_lib.CallEvent)

    def next(self) -> Optional[tuple[int, int, bytes, str]]:
        """(http_status, kind, data, event) of the next event, or None when the call has ended.
        A KeyboardInterrupt while waiting cancels the call and propagates."""
        if self._ptr is None:
            return None
        try:
            while True:
                st = lib.specula_call_next(self._ptr, POLL_MS, ctypes.byref(self._ev))
                if st == _lib.ERR_TIMEOUT:
                    continue
                if st == _lib.ERR_UNAVAILABLE:
                    return None
                if st != _lib.OK:
                    raise_status(st)
                ev = self._ev
                data = ctypes.string_at(ev.data, ev.data_len) if ev.data_len else b""
                return ev.http_status, ev.kind, data, (ev.event or b"").decode()
        except BaseException:
            self.close()
            raise

    def whole(self) -> dict:
        """The answer of a non-streamed call as a dict (or the error it says, raised)."""
        try:
            got = self.next()
            if got is None:
                raise SpeculaError("the call ended without an answer")
            status, _, data, _ = got
            if status != 200:
                raise_answer(status, data)
            return json.loads(data)
        finally:
            self.close()

    def stream(self) -> Iterator[dict]:
        """The events of a streamed call as dicts; an error answer or error event raises.
        Closing the generator (a break, garbage collection) cancels the call."""
        try:
            while True:
                got = self.next()
                if got is None:
                    return
                status, kind, data, _ = got
                if kind == 1:  # a whole answer: an error before the stream began
                    if status != 200:
                        raise_answer(status, data)
                    yield json.loads(data)
                    return
                if kind == 3:
                    return
                if data == b"[DONE]":
                    continue
                chunk = json.loads(data)
                if isinstance(chunk, dict) and chunk.get("type") == "error" or (
                        isinstance(chunk, dict) and "error" in chunk and "choices" not in chunk):
                    # An error event mid-stream: the request's own fault (400), or the engine's
                    # (503: cancelled or shutting down, as when the model is closed).
                    err = chunk.get("error") if isinstance(chunk.get("error"), dict) else {}
                    raise_answer(400 if err.get("type") == "invalid_request_error" else 503, data)
                yield chunk
        finally:
            self.close()

    def cancel(self) -> None:
        if self._ptr is not None:
            lib.specula_call_cancel(self._ptr)

    def close(self) -> None:
        if self._ptr is not None:
            lib.specula_call_free(self._ptr)
            self._ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
