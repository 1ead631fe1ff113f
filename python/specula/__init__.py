"""specula — the specula inference engine as a Python package.

  from specula import Llama     # llama-cpp-python's Llama, for its most used calls
  from specula import Engine    # the native API: many concurrent requests, token events

Both run on libspecula (the C API, include/specula/specula.h) through ctypes: the GIL is
released while the engine works.
"""
from ._core import (Busy, Closed, ContextOverflow, InvalidArgument, ModelNotFound, NotFound, SpeculaError,
                    Unimplemented)
from ._lib import lib as _native
from .engine import Completion, Engine, Request, TokenEvent
from .llama import LLAMA_DEFAULT_SEED, Llama
from .llama_grammar import LlamaGrammar
from .llama_speculative import LlamaPromptLookupDecoding

__version__ = _native.specula_version().decode()


def system_info() -> str:
    """The kernel tier specula chose for this CPU and the CPU's features."""
    return _native.specula_system_info().decode()


__all__ = ["Llama", "Engine", "Request", "TokenEvent", "Completion", "LlamaGrammar", "LlamaPromptLookupDecoding",
           "SpeculaError", "InvalidArgument", "ContextOverflow", "NotFound", "ModelNotFound", "Unimplemented", "Busy",
           "Closed",
           "LLAMA_DEFAULT_SEED", "system_info", "__version__"]
