/* specula/specula.h — specula's C API: the engine as a library (libspecula.so, or the static
 * libspecula.a with libspecula_llguidance.a).
 *
 * One engine, three front doors: a model opened here is the same object `specula serve`
 * serves (a tokenizer, a chat template, and the continuously batched engine with its
 * speculative decoding and prompt cache). Requests from many threads run together in one
 * batch, exactly as the server's do; a request's tokens do not depend on what else runs
 * (batch invariance). Two ways to ask:
 *
 *   - specula_request_*: a generation with typed parameters (a prompt as token ids or
 *     text, or chat messages rendered by the model's template; the sampling fields; stop
 *     strings; logprobs; a grammar, JSON schema or regex), delivering token ids, their
 *     text and logprobs by polling (specula_request_next) or through a callback
 *     (specula_generate).
 *   - specula_call_*: any route of the HTTP API run in-process, without a socket: the
 *     request body is the JSON an HTTP client would send (docs/API.md), the answer is the
 *     JSON the server would write — a whole body, or a stream's events one by one. Chat
 *     completions with tools and tool calls, response_format, n > 1, embeddings,
 *     Anthropic messages, tokenize / detokenize / apply-template all come this way.
 *
 * Conventions.
 *   - Every fallible function returns a specula_status; SPECULA_OK is 0. On an error,
 *     specula_last_error() returns a message for people that names the problem (the
 *     parameter, the file, the value); it is per thread and stays valid until the next
 *     failing call on that thread.
 *   - Parameter structs carry their own size (`struct_size`, set by the *_default_params
 *     function): fill one with the defaults, then change fields. A caller compiled against
 *     an older, shorter struct keeps working; fields it does not know take their defaults.
 *     No struct is passed or returned by value (FFI layers such as bun:ffi cannot).
 *   - Strings are UTF-8 and NUL-terminated unless a length is given. Strings and arrays
 *     returned through `char**` / `int32_t**` belong to the caller: free them with
 *     specula_free(). Pointers inside an update or event struct belong to the request and
 *     stay valid until the next call on that request (or its free).
 *   - Threading: every function may be called from any thread. A model, a request and a
 *     call may be used from several threads at once, with two exceptions: the *_next
 *     functions of one request or call from one thread at a time, and a *_free only once
 *     nothing else uses that handle (the *_cancel functions are always safe).
 *   - No C++ exception crosses this API; an allocation failure is SPECULA_ERR_INTERNAL.
 *   - Units: tokens, bytes, seconds, milliseconds, as each field says.
 *
 * Lifetime: a request or call keeps its model alive. specula_model_free() releases the
 * caller's handle and cancels the model's running requests; the model's memory goes
 * when the last request or call on it is freed too.
 *
 * Errors returned (specula_status): see each function. The codes are the engine's
 * StatusCode (include/specula/status.h) with the same numbers.
 */
#ifndef SPECULA_SPECULA_H
#define SPECULA_SPECULA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define SPECULA_API
#else
#define SPECULA_API __attribute__((visibility("default")))
#endif

/* The version of this API: bumped when a function changes meaning. Fields are only ever
 * appended to parameter structs (their struct_size tells them apart). */
#define SPECULA_API_VERSION 1

typedef enum specula_status {
  SPECULA_OK = 0,
  SPECULA_ERR_INVALID_ARGUMENT = 1,  /* a parameter, field, file or value is wrong */
  SPECULA_ERR_NOT_FOUND = 2,         /* a file, route or model does not exist */
  SPECULA_ERR_TOO_LARGE = 3,         /* over a size limit (an output buffer too small: see the function) */
  SPECULA_ERR_CONTEXT_OVERFLOW = 4,  /* the prompt (+ max_tokens) does not fit the context */
  SPECULA_ERR_BUSY = 5,              /* the engine's queue is full: retry later */
  SPECULA_ERR_UNAVAILABLE = 6,       /* the model is closed or closing */
  SPECULA_ERR_UNIMPLEMENTED = 7,     /* a valid request for something not implemented */
  SPECULA_ERR_UNAUTHENTICATED = 8,
  SPECULA_ERR_PERMISSION_DENIED = 9,
  SPECULA_ERR_TIMEOUT = 10,          /* a *_next call's wait ended with nothing new (not an error to report) */
  SPECULA_ERR_CANCELLED = 11,
  SPECULA_ERR_INTERNAL = 12          /* the engine failed */
} specula_status;

/* This thread's last error message ("" when none). */
SPECULA_API const char* specula_last_error(void);
/* "ok", "invalid_argument", "not_found", ... (StatusCode's names, status_code_name in
 * specula/status.h); "unknown" for a number outside the enum; never NULL. */
SPECULA_API const char* specula_status_name(specula_status status);
/* "0.1.0" (the library's version). */
SPECULA_API const char* specula_version(void);
/* The kernel tier chosen for this CPU at run time and its features, e.g.
 * "isa=avx512 (avx2 fma f16c avx512f avx512bw avx512vl avx512vnni)". */
SPECULA_API const char* specula_system_info(void);
/* Frees a string or array this API returned to the caller (NULL: nothing). */
SPECULA_API void specula_free(void* p);

/* ---- Models ------------------------------------------------------------------------ */

typedef struct specula_model specula_model;

/* What specula_model_load is told: the flags of `specula serve` (docs/API.md) by name. */
typedef struct specula_model_params {
  size_t struct_size;           /* sizeof(specula_model_params), set by specula_model_default_params */
  int32_t n_threads;            /* compute threads; 0: all cores */
  int32_t n_parallel;           /* requests decoded together (state rows), 1..256; default 4 */
  int64_t n_ctx;                /* total tokens of all requests (llama-server's -c); one request may
                                   use all of it, at most the model's training context;
                                   0: 4096 x n_parallel; -1: the training context x n_parallel */
  const char* cache_type_k;     /* K cache type: f16 (default), q8_0, q4_0, tq3..tq5 (NULL: f16) */
  const char* cache_type_v;     /* V cache type (NULL: f16) */
  int64_t kv_delay;             /* delayed quantization: newest N positions kept in f16; 0: off */
  int64_t kv_budget;            /* bytes of state all requests may hold; 0: from n_ctx */
  int64_t step_tokens;          /* tokens per engine step (decode rows + prompt chunks); default 512 */
  int32_t max_queue;            /* requests waiting for a row before SPECULA_ERR_BUSY; default 64 */
  const char* spec;             /* draft source: "ngram", "draft", "none"; NULL/"": draft when
                                   draft_model is set, else none */
  const char* draft_model;      /* path of a draft model with the same vocabulary (NULL: none) */
  int32_t spec_depth;           /* most drafted tokens per verify step, 1..32; default 4 */
  int32_t spec_max_batch;       /* speculate only while at most this many requests decode; 0:
                                   always; default 2 */
  int32_t spec_rejection;       /* 1: rejection sampling at temperature > 0 (draft model); 0: exact
                                   match (default) */
  int64_t cache_ram_mib;        /* prompt cache in RAM, MiB; -1: a quarter of RAM up to 8192
                                   (default); 0: off */
  const char* cache_dir;        /* prompt cache on disk in this folder (NULL: none) */
  int64_t cache_disk_mib;       /* its size; 0: 4 x RAM tier, at least 1024 */
  int64_t cache_checkpoint;     /* ring/recurrent layers: a cache entry every N prompt tokens; 1024 */
  int64_t generation_checkpoint;/* store a running generation every N tokens; 0: off */
  const char* model_id;         /* the id specula_call requests may name; NULL: the file name */
  const char* chat_template;    /* Jinja source replacing the model's template (NULL: the model's) */
  const char* chat_template_file; /* ... or read from this file (NULL: none) */
  const char* quantize;         /* quantize float weights at load: "q8_0", "q4_k" (NULL: off) */
  const char* pooling;          /* embeddings: "mean", "last" (NULL: the model's, else mean) */
} specula_model_params;

SPECULA_API void specula_model_default_params(specula_model_params* params);

/* Loads a GGUF file or a Hugging Face / MLX safetensors folder and starts its engine.
 * `params` NULL: the defaults. On success *out owns the model (specula_model_free).
 * Errors: SPECULA_ERR_INVALID_ARGUMENT (NULL path or out, a struct_size that is not one
 * this library knows, a field out of range — the message names it — or a file that is not
 * a model), SPECULA_ERR_NOT_FOUND (no such file or folder; chat_template_file or
 * draft_model missing), SPECULA_ERR_INTERNAL. Takes seconds; blocks the calling thread. */
SPECULA_API specula_status specula_model_load(const char* path, const specula_model_params* params,
                                              specula_model** out);
/* Releases the caller's handle (NULL: nothing): cancels every running request of the
 * model; its memory goes once no request or call holds it. */
SPECULA_API void specula_model_free(specula_model* model);

/* Metadata. These never fail on a valid model. */
SPECULA_API int64_t specula_model_n_ctx(const specula_model* model);       /* tokens one request may hold */
SPECULA_API int64_t specula_model_n_ctx_train(const specula_model* model); /* the model's training context (0: unknown) */
SPECULA_API int32_t specula_model_n_vocab(const specula_model* model);
SPECULA_API int32_t specula_model_n_embd(const specula_model* model);      /* hidden size: an embedding's length */
SPECULA_API int32_t specula_model_n_parallel(const specula_model* model);
SPECULA_API int32_t specula_model_token_bos(const specula_model* model);   /* -1: none */
SPECULA_API int32_t specula_model_token_eos(const specula_model* model);   /* -1: none */
/* 1 when `token` ends a generation (EOS, <end_of_turn>, <|im_end|> ...), else 0. */
SPECULA_API int32_t specula_model_token_is_eog(const specula_model* model, int32_t token);
/* The id requests name (model_id or the file name); valid while the model lives. */
SPECULA_API const char* specula_model_id(const specula_model* model);
/* {"id", "path", "architecture", "name", "n_vocab", "n_ctx", "n_ctx_train", "n_embd",
 *  "n_layer", "n_parallel", "chat_template" (where the template came from: "model metadata",
 *  "file", or null when there is none), "kv_layouts", "system_info", "metadata" (the GGUF's
 *  scalar keys -> their values as text, as llama-cpp-python's Llama.metadata; arrays left
 *  out)} as JSON; free with specula_free. */
SPECULA_API specula_status specula_model_info_json(const specula_model* model, char** out_json);

/* The engine's counters now, as JSON: {"running_rows", "queue_depth", "n_rows", "steps",
 * "prompt_tokens", "generated_tokens", "finished": {"stop", "length", "cancelled", "failed"},
 * "kv_bytes", "kv_budget", "drafted", "accepted"} (steps: engine steps run so far; the
 * rest as /metrics). Free with specula_free. */
SPECULA_API specula_status specula_model_stats_json(const specula_model* model, char** out_json);

/* ---- Tokens ------------------------------------------------------------------------ */

/* Tokenizes text[0..text_len) with the model's vocabulary. add_special: the BOS the model
 * adds (as llama.cpp's add_special); parse_special: control-token texts ("<|im_end|>")
 * become control tokens (else they are text). *out_tokens (free with specula_free) gets
 * *n_tokens ids. Errors: SPECULA_ERR_INVALID_ARGUMENT (NULL pointers). */
SPECULA_API specula_status specula_tokenize(const specula_model* model, const char* text, size_t text_len,
                                            int32_t add_special, int32_t parse_special, int32_t** out_tokens,
                                            size_t* n_tokens);
/* The bytes of tokens[0..n_tokens), as llama.cpp's llama_detokenize: remove_special drops
 * BOS/EOS, render_special writes control tokens' text. The bytes are the tokens' pieces
 * (a character cut at the end stays cut; a tokenizer.json model replaces invalid bytes by
 * U+FFFD). *out_text (free with specula_free) is NUL-terminated; *out_len (may be NULL) its
 * length. Errors: SPECULA_ERR_INVALID_ARGUMENT (an id outside [0, n_vocab): the message
 * names it). */
SPECULA_API specula_status specula_detokenize(const specula_model* model, const int32_t* tokens, size_t n_tokens,
                                              int32_t remove_special, int32_t render_special, char** out_text,
                                              size_t* out_len);
/* The bytes of one token (may be part of a UTF-8 character); render_special as above. */
SPECULA_API specula_status specula_token_to_piece(const specula_model* model, int32_t token, int32_t render_special,
                                                  char** out_piece, size_t* out_len);
/* Chat messages (a JSON array of OpenAI messages) and tools (a JSON array, or NULL)
 * rendered by the model's chat template with the generation prompt: *out_text the text
 * (as /apply-template), and *out_tokens (NULL: not wanted) the prompt's ids with the
 * server's safety — control tokens come only from the template, never from a message's
 * text. Errors: SPECULA_ERR_INVALID_ARGUMENT (malformed JSON, no chat template, the
 * template failed on these messages). */
SPECULA_API specula_status specula_apply_chat_template(const specula_model* model, const char* messages_json,
                                                       const char* tools_json, char** out_text, int32_t** out_tokens,
                                                       size_t* n_tokens);

/* ---- LoRA adapters ------------------------------------------------------------------- */

/* Loads a LoRA adapter — llama.cpp's GGUF LoRA file or a PEFT folder (adapter_config.json +
 * adapter_model.safetensors) — for `model`, applied without merging (docs/API.md, "LoRA
 * adapters"). `name` (NULL or "": the file's stem) is what a request's options_json
 * {"model": NAME} selects; `scale` is its global scale: every request that chooses no
 * adapters runs with the adapters whose global scale is not 0 (llama-cpp-python's
 * Llama(lora_path, lora_scale)), and one that sends options_json {"lora": [{"id", "scale"}]}
 * runs with those instead. *out_id (may be NULL): the adapter's id (0, 1, ... in load order,
 * never reused). Errors: SPECULA_ERR_INVALID_ARGUMENT (not an adapter, made for another
 * architecture or model — the message names the tensor and both shapes —, a name already
 * loaded, a scale that is not finite), SPECULA_ERR_NOT_FOUND (no such file). Any thread;
 * requests running meanwhile are unaffected. */
SPECULA_API specula_status specula_lora_load(specula_model* model, const char* path, const char* name, float scale,
                                             int64_t* out_id);
/* Unloads the adapter `name`: later requests cannot select it; those running with it finish
 * with it. Errors: SPECULA_ERR_NOT_FOUND (no adapter of that name; the message lists them). */
SPECULA_API specula_status specula_lora_unload(specula_model* model, const char* name);
/* The loaded adapters as JSON text: [{"id", "name", "path", "scale"}] (free with specula_free). */
SPECULA_API specula_status specula_lora_list_json(const specula_model* model, char** out_json);

/* ---- Generation: typed requests ---------------------------------------------------- */

typedef struct specula_request specula_request;

/* One generation. Exactly one of prompt_tokens, prompt, messages_json is set. Floats set
 * to NAN and integers set to -1 (where noted) take the model's defaults (its
 * generation_config.json, else OpenAI's: temperature 1, top_p 1). */
typedef struct specula_request_params {
  size_t struct_size;                /* sizeof(specula_request_params) */
  const int32_t* prompt_tokens;      /* the prompt as ids (used as given: no BOS added) ... */
  size_t n_prompt_tokens;
  const char* prompt;                /* ... or as text (BOS added as the model does) ... */
  const char* messages_json;         /* ... or chat messages (JSON array), rendered by the template */
  const char* tools_json;            /* with messages: tool definitions (JSON array; NULL: none) */
  int32_t max_tokens;                /* tokens to generate at most; -1: until the context is full;
                                        0 (a prompt, not messages): prefill only */
  float temperature;                 /* NAN: default; 0: greedy */
  float top_p;                       /* NAN: default */
  int32_t top_k;                     /* -1: default; 0: off */
  float min_p;                       /* NAN: default */
  float repeat_penalty;              /* NAN: default (1: off) */
  float presence_penalty;            /* NAN: default (0) */
  float frequency_penalty;           /* NAN: default (0) */
  int32_t has_seed;                  /* 1: use `seed`; 0: a random seed */
  uint64_t seed;
  const char* const* stop;           /* stop strings (up to 64): the text ends before one */
  size_t n_stop;
  int32_t logprobs;                  /* -1: none; 0..20: each token's logprob (+ k alternatives in
                                        options_json's answer shape; here the token's own) */
  int32_t ignore_eos;                /* 1: go on past end-of-generation tokens */
  int32_t speculative;               /* 0: this request does not speculate; 1 (default): it may */
  int32_t parse_special;             /* text prompt: control-token texts become control tokens
                                        (default 1, as llama.cpp) */
  const char* grammar;               /* structured output: a GBNF grammar (NULL: none) ... */
  const char* json_schema;           /* ... or a JSON schema (JSON text) ... */
  const char* regex;                 /* ... or a regular expression */
  /* Any other field of a /v1/completions (prompt) or /v1/chat/completions (messages)
   * body, as JSON object text (docs/API.md: dry_*, xtc_*, mirostat, typical_p, logit_bias,
   * top_n_sigma, tool_choice, response_format, ...). The typed fields above win. NULL: none. */
  const char* options_json;
} specula_request_params;

SPECULA_API void specula_request_default_params(specula_request_params* params);

/* What a request produced since the previous update. */
typedef struct specula_request_update {
  size_t struct_size;                /* set by the caller: sizeof(specula_request_update) */
  const int32_t* tokens;             /* token ids generated since the last update (the end-of-
                                        generation token not included) */
  size_t n_tokens;
  const float* logprobs;             /* n_tokens logprobs (natural log, temperature 1), or NULL when
                                        the request asked for none */
  const char* text;                  /* text released since the last update (valid UTF-8; text that
                                        might begin a stop string is held back until it cannot) */
  size_t text_len;
  int32_t finished;                  /* 1: this is the last update */
  /* When finished: */
  const char* finish_reason;         /* "stop" (EOS, a stop string, the grammar's end), "length",
                                        "cancelled", "failed" */
  const char* stop_sequence;         /* the stop string that ended it, or NULL */
  const char* error;                 /* "failed": why; else NULL */
  int64_t n_prompt_tokens;           /* the prompt's tokens */
  int64_t n_cached_tokens;           /* of them, served from the prompt cache */
  int64_t n_generated_tokens;        /* sampled tokens, an end-of-generation token included */
  double queue_seconds, prefill_seconds, decode_seconds;
  int64_t drafted_tokens, accepted_tokens; /* speculative decoding */
  uint64_t seed;                     /* the seed it sampled with (to reproduce it) */
} specula_request_update;

/* Validates, prepares (prompt ids, grammar) and queues a request. Errors (nothing queued):
 * SPECULA_ERR_INVALID_ARGUMENT (no prompt or two of them, a field out of range — the
 * message names the field — a grammar that does not compile, no chat template),
 * SPECULA_ERR_CONTEXT_OVERFLOW, SPECULA_ERR_BUSY (the queue is full),
 * SPECULA_ERR_UNAVAILABLE (the model was freed). */
SPECULA_API specula_status specula_request_start(specula_model* model, const specula_request_params* params,
                                                 specula_request** out);
/* Waits up to timeout_ms (0: no wait; -1: until there is news) for news and fills *update
 * with everything since the last call. SPECULA_OK: *update holds news (or the end);
 * SPECULA_ERR_TIMEOUT: nothing new yet; SPECULA_ERR_INVALID_ARGUMENT: NULL pointers or a
 * wrong struct_size; after the final update: SPECULA_ERR_UNAVAILABLE. */
SPECULA_API specula_status specula_request_next(specula_request* request, int32_t timeout_ms,
                                                specula_request_update* update);
/* Asks the engine to stop the request (its row is freed at the next step); the final
 * update then says "cancelled" (or how it ended first). Idempotent, any thread. */
SPECULA_API void specula_request_cancel(specula_request* request);
/* Cancels it if still running and frees the handle (NULL: nothing). */
SPECULA_API void specula_request_free(specula_request* request);

/* Called by specula_generate on the calling thread for every update; return 0 to cancel. */
typedef int32_t (*specula_update_callback)(const specula_request_update* update, void* user_data);
/* specula_request_start + next until finished, calling `callback` for each update (NULL:
 * none) on the calling thread; *final_update (may be NULL; its struct_size set) gets the
 * last one, copied: its pointers stay valid until the next specula_generate on this thread.
 * The request is freed before it returns. Errors: those of specula_request_start, and
 * SPECULA_ERR_INVALID_ARGUMENT for a final_update whose struct_size is wrong (checked
 * first). */
SPECULA_API specula_status specula_generate(specula_model* model, const specula_request_params* params,
                                            specula_update_callback callback, void* user_data,
                                            specula_request_update* final_update);

/* ---- Generation and more: the HTTP API in-process ---------------------------------- */

typedef struct specula_call specula_call;

/* One piece of a call's answer. */
typedef struct specula_call_event {
  size_t struct_size;                /* set by the caller: sizeof(specula_call_event) */
  int32_t http_status;               /* the answer's status (200, 400, 404, 429, ...) */
  /* 1: the whole answer (a JSON body); 2: one event of a stream (text/event-stream): its
   * `data` (a JSON object, or "[DONE]") and its event name (Anthropic's; "" otherwise);
   * 3: the end of a stream (data empty). */
  int32_t kind;
  const char* data;                  /* data_len bytes, NUL-terminated too */
  size_t data_len;
  const char* event;                 /* NUL-terminated; "" when the event has no name */
  int32_t finished;                  /* 1: nothing follows */
} specula_call_event;

/* Starts `method` `path` with `body` (JSON text; NULL: empty) on a thread of its own, as
 * the server would answer it: paths and bodies of docs/API.md — "/v1/completions",
 * "/v1/chat/completions", "/v1/messages", "/v1/embeddings", "/tokenize", "/detokenize",
 * "/apply-template", "/v1/models", "/completion", ... An unknown path still starts and
 * answers 404, a bad body 400, as over HTTP. Errors: SPECULA_ERR_INVALID_ARGUMENT (NULL
 * model, method, path or out), SPECULA_ERR_UNAVAILABLE (the model was freed). */
SPECULA_API specula_status specula_call_start(specula_model* model, const char* method, const char* path,
                                              const char* body, size_t body_len, specula_call** out);
/* As specula_request_next, for a call: SPECULA_OK with the next event; SPECULA_ERR_TIMEOUT:
 * none yet; SPECULA_ERR_UNAVAILABLE: the call has finished and every event was read. */
SPECULA_API specula_status specula_call_next(specula_call* call, int32_t timeout_ms, specula_call_event* event);
/* As the client closing its connection: the call's generations are cancelled. Any thread. */
SPECULA_API void specula_call_cancel(specula_call* call);
/* Cancels the call if it runs, waits for its thread and frees it (NULL: nothing). */
SPECULA_API void specula_call_free(specula_call* call);

#ifdef __cplusplus
}
#endif

#endif /* SPECULA_SPECULA_H */
