"""A small program written against llama-cpp-python's API — completion, chat, streaming,
tools, a json_schema response, embeddings — used as it is by tools/make_python_fixtures.py
(with llama-cpp-python: the oracle) and by test_llama_script.py (with `from specula import
Llama` in place of the import line: the only change).

Usage: python llama_cpp_script.py MODEL.gguf  -> one JSON object on stdout.
"""
import json
import sys

from llama_cpp import Llama

MODEL = sys.argv[1]
out = {}

llm = Llama(model_path=MODEL, n_ctx=2048, n_threads=2, seed=1234, verbose=False)
out["n_ctx"] = llm.n_ctx()
out["token_eos"] = llm.token_eos()
out["tokenize"] = llm.tokenize(b"def quicksort(arr):\n    return sorted(arr)  # \xc3\xa9t\xc3\xa9")

# Completion, greedy.
r = llm("def fibonacci(n):", max_tokens=32, temperature=0.0)
out["completion"] = r["choices"][0]["text"]
out["completion_finish"] = r["choices"][0]["finish_reason"]
out["completion_usage"] = [r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"]]

# Chat, greedy, whole and streamed.
messages = [{"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Name three primary colors."}]
r = llm.create_chat_completion(messages=messages, max_tokens=40, temperature=0.0)
out["chat"] = r["choices"][0]["message"]["content"]
out["chat_role"] = r["choices"][0]["message"]["role"]
streamed = ""
for chunk in llm.create_chat_completion(messages=messages, max_tokens=40, temperature=0.0, stream=True):
    delta = chunk["choices"][0]["delta"]
    streamed += delta.get("content") or ""
out["chat_stream"] = streamed

# A tool call, the function named (the call's arguments follow its JSON schema).
tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
r = llm.create_chat_completion(
    messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=tools,
    tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=48, temperature=0.0)
call = r["choices"][0]["message"]["tool_calls"][0]
out["tool_name"] = call["function"]["name"]
out["tool_arguments"] = json.loads(call["function"]["arguments"])

# A response that follows a JSON schema.
schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
r = llm.create_chat_completion(
    messages=[{"role": "user", "content": "Invent a person. Answer in JSON."}],
    response_format={"type": "json_object", "schema": schema}, max_tokens=48, temperature=0.0)
person = json.loads(r["choices"][0]["message"]["content"])
out["json_keys"] = sorted(person)
out["json_types"] = [type(person["name"]).__name__, type(person["age"]).__name__]
llm.close()

# Embeddings (mean pooling: llama.cpp's LLAMA_POOLING_TYPE_MEAN is 1).
emb = Llama(model_path=MODEL, n_ctx=512, n_threads=2, embedding=True, pooling_type=1, verbose=False)
vectors = emb.embed(["The cat sat on the mat.", "A dog ran in the park."])
out["embed_dims"] = [len(v) for v in vectors]
out["embed_head"] = [round(x, 5) for x in vectors[0][:8]]
out["embed_norm"] = round(sum(x * x for x in vectors[0]) ** 0.5, 4)
emb.close()

print(json.dumps(out))
