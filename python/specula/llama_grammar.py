"""specula.llama_grammar — llama-cpp-python's LlamaGrammar: a GBNF grammar (from_string,
from_file) or a JSON schema (from_json_schema), handed to the engine's structured outputs
(llguidance) as the request's grammar."""
from __future__ import annotations

import json


class LlamaGrammar:
    def __init__(self, *, _grammar: str = None, _json_schema: dict = None):
        self._grammar = _grammar
        self._json_schema = _json_schema

    def request_fields(self) -> dict:
        """The request body's field for this grammar."""
        return {"grammar": self._grammar} if self._grammar is not None else {"json_schema": self._json_schema}

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        if not isinstance(grammar, str) or not grammar.strip():
            raise ValueError("the grammar is empty")
        return cls(_grammar=grammar)

    @classmethod
    def from_file(cls, file: str, verbose: bool = True) -> "LlamaGrammar":
        with open(file, encoding="utf-8") as f:
            return cls.from_string(f.read(), verbose)

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(_json_schema=json.loads(json_schema))
