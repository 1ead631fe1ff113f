"""specula._lib — ctypes bindings of the C API (include/specula/specula.h in the source tree).

Loads libspecula.so: $SPECULA_LIBRARY when set, else the copy installed beside this module.
Every foreign call releases the GIL (ctypes does), so the engine runs while Python threads
go on. Struct layouts mirror the header field for field; their struct_size fields are set
from ctypes.sizeof, which the library checks.
"""
from __future__ import annotations

import ctypes
import math
import os
from ctypes import (POINTER, Structure, c_char_p, c_double, c_float, c_int32, c_int64, c_size_t, c_uint64, c_void_p)

# specula_status
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_NOT_FOUND = 2
ERR_TOO_LARGE = 3
ERR_CONTEXT_OVERFLOW = 4
ERR_BUSY = 5
ERR_UNAVAILABLE = 6
ERR_UNIMPLEMENTED = 7
ERR_TIMEOUT = 10
ERR_CANCELLED = 11
ERR_INTERNAL = 12


class ModelParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("n_threads", c_int32),
        ("n_parallel", c_int32),
        ("n_ctx", c_int64),
        ("cache_type_k", c_char_p),
        ("cache_type_v", c_char_p),
        ("kv_delay", c_int64),
        ("kv_budget", c_int64),
        ("step_tokens", c_int64),
        ("max_queue", c_int32),
        ("spec", c_char_p),
        ("draft_model", c_char_p),
        ("spec_depth", c_int32),
        ("spec_max_batch", c_int32),
        ("spec_rejection", c_int32),
        ("cache_ram_mib", c_int64),
        ("cache_dir", c_char_p),
        ("cache_disk_mib", c_int64),
        ("cache_checkpoint", c_int64),
        ("generation_checkpoint", c_int64),
        ("model_id", c_char_p),
        ("chat_template", c_char_p),
        ("chat_template_file", c_char_p),
        ("quantize", c_char_p),
        ("pooling", c_char_p),
    ]


class RequestParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("prompt_tokens", POINTER(c_int32)),
        ("n_prompt_tokens", c_size_t),
        ("prompt", c_char_p),
        ("messages_json", c_char_p),
        ("tools_json", c_char_p),
        ("max_tokens", c_int32),
        ("temperature", c_float),
        ("top_p", c_float),
        ("top_k", c_int32),
        ("min_p", c_float),
        ("repeat_penalty", c_float),
        ("presence_penalty", c_float),
        ("frequency_penalty", c_float),
        ("has_seed", c_int32),
        ("seed", c_uint64),
        ("stop", POINTER(c_char_p)),
        ("n_stop", c_size_t),
        ("logprobs", c_int32),
        ("ignore_eos", c_int32),
        ("speculative", c_int32),
        ("parse_special", c_int32),
        ("grammar", c_char_p),
        ("json_schema", c_char_p),
        ("regex", c_char_p),
        ("options_json", c_char_p),
    ]


class RequestUpdate(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("tokens", POINTER(c_int32)),
        ("n_tokens", c_size_t),
        ("logprobs", POINTER(c_float)),
        ("text", c_void_p),
        ("text_len", c_size_t),
        ("finished", c_int32),
        ("finish_reason", c_char_p),
        ("stop_sequence", c_char_p),
        ("error", c_char_p),
        ("n_prompt_tokens", c_int64),
        ("n_cached_tokens", c_int64),
        ("n_generated_tokens", c_int64),
        ("queue_seconds", c_double),
        ("prefill_seconds", c_double),
        ("decode_seconds", c_double),
        ("drafted_tokens", c_int64),
        ("accepted_tokens", c_int64),
        ("seed", c_uint64),
    ]


class CallEvent(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("http_status", c_int32),
        ("kind", c_int32),
        ("data", c_void_p),
        ("data_len", c_size_t),
        ("event", c_char_p),
        ("finished", c_int32),
    ]


def _library_path() -> str:
    env = os.environ.get("SPECULA_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "libspecula.so")


def _load():
    path = _library_path()
    if not os.path.exists(path):
        raise ImportError(f"specula: the engine library is missing at {path} (install the package with "
                          "`pip install ./python`, or set SPECULA_LIBRARY to a built libspecula.so)")
    lib = ctypes.CDLL(path)
    sigs = {
        "specula_last_error": (c_char_p, []),
        "specula_status_name": (c_char_p, [c_int32]),
        "specula_version": (c_char_p, []),
        "specula_system_info": (c_char_p, []),
        "specula_free": (None, [c_void_p]),
        "specula_model_default_params": (None, [POINTER(ModelParams)]),
        "specula_model_load": (c_int32, [c_char_p, POINTER(ModelParams), POINTER(c_void_p)]),
        "specula_model_free": (None, [c_void_p]),
        "specula_model_n_ctx": (c_int64, [c_void_p]),
        "specula_model_n_ctx_train": (c_int64, [c_void_p]),
        "specula_model_n_vocab": (c_int32, [c_void_p]),
        "specula_model_n_embd": (c_int32, [c_void_p]),
        "specula_model_n_parallel": (c_int32, [c_void_p]),
        "specula_model_token_bos": (c_int32, [c_void_p]),
        "specula_model_token_eos": (c_int32, [c_void_p]),
        "specula_model_token_is_eog": (c_int32, [c_void_p, c_int32]),
        "specula_model_id": (c_char_p, [c_void_p]),
        "specula_model_info_json": (c_int32, [c_void_p, POINTER(c_void_p)]),
        "specula_model_stats_json": (c_int32, [c_void_p, POINTER(c_void_p)]),
        "specula_lora_load": (c_int32, [c_void_p, c_char_p, c_char_p, ctypes.c_float, POINTER(c_int64)]),
        "specula_lora_unload": (c_int32, [c_void_p, c_char_p]),
        "specula_lora_list_json": (c_int32, [c_void_p, POINTER(c_void_p)]),
        "specula_tokenize": (c_int32, [c_void_p, c_char_p, c_size_t, c_int32, c_int32, POINTER(POINTER(c_int32)),
                                       POINTER(c_size_t)]),
        "specula_detokenize": (c_int32, [c_void_p, POINTER(c_int32), c_size_t, c_int32, c_int32, POINTER(c_void_p),
                                         POINTER(c_size_t)]),
        "specula_token_to_piece": (c_int32, [c_void_p, c_int32, c_int32, POINTER(c_void_p), POINTER(c_size_t)]),
        "specula_apply_chat_template": (c_int32, [c_void_p, c_char_p, c_char_p, POINTER(c_void_p),
                                                  POINTER(POINTER(c_int32)), POINTER(c_size_t)]),
        "specula_request_default_params": (None, [POINTER(RequestParams)]),
        "specula_request_start": (c_int32, [c_void_p, POINTER(RequestParams), POINTER(c_void_p)]),
        "specula_request_next": (c_int32, [c_void_p, c_int32, POINTER(RequestUpdate)]),
        "specula_request_cancel": (None, [c_void_p]),
        "specula_request_free": (None, [c_void_p]),
        "specula_call_start": (c_int32, [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t, POINTER(c_void_p)]),
        "specula_call_next": (c_int32, [c_void_p, c_int32, POINTER(CallEvent)]),
        "specula_call_cancel": (None, [c_void_p]),
        "specula_call_free": (None, [c_void_p]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


lib = _load()


def last_error() -> str:
    return (lib.specula_last_error() or b"").decode("utf-8", "replace")


def status_name(status: int) -> str:
    return lib.specula_status_name(status).decode()


def take_string(p: c_void_p, n: int | None = None) -> bytes:
    """The bytes of a string the library returned, freed."""
    try:
        if not p:
            return b""
        return ctypes.string_at(p, n) if n is not None else ctypes.string_at(p)
    finally:
        lib.specula_free(p)


def take_ids(p, n: int) -> list[int]:
    try:
        return [p[i] for i in range(n)] if n else []
    finally:
        lib.specula_free(ctypes.cast(p, c_void_p))


def nan() -> float:
    return math.nan
