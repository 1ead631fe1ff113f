/* tests/capi/capi_smoke.c — the C API used from C (C11, -pedantic): the header compiles as
 * C, libspecula.so links, and a model answers through both ways of asking. Checks on the
 * model given as argv[1] (Gemma 3 270M in ctest): errors for bad input (NULL path, a missing
 * file, a struct_size from elsewhere, an unknown route), tokenize/detokenize round trip, a
 * greedy typed request by callback equal to the same request polled, a call to
 * /v1/completions whose text equals the typed request's, cancellation, and the stats.
 * Exit 0: pass; 1: fail; 77: skipped (no model). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specula/specula.h"

static int failures = 0;
#define CHECK(cond, ...)                        \
  do {                                          \
    if (!(cond)) {                              \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);             \
      fprintf(stderr, "\n");                    \
      ++failures;                               \
    }                                           \
  } while (0)

struct collected {
  char text[4096];
  int32_t tokens[256];
  size_t n_tokens;
  int updates;
};

static int32_t on_update(const specula_request_update* u, void* user) {
  struct collected* c = (struct collected*)user;
  size_t i;
  strncat(c->text, u->text, sizeof(c->text) - strlen(c->text) - 1);
  for (i = 0; i < u->n_tokens && c->n_tokens < 256; ++i) c->tokens[c->n_tokens++] = u->tokens[i];
  ++c->updates;
  return 1;
}

int main(int argc, char** argv) {
  specula_model* model = NULL;
  specula_model_params mp;
  specula_request_params rp;
  specula_request_update fin;
  struct collected by_callback, by_polling;
  specula_request* req = NULL;
  specula_call* call = NULL;
  specula_call_event ev;
  specula_status st;
  int32_t* ids = NULL;
  size_t n_ids = 0;
  char* text = NULL;
  char* json = NULL;
  FILE* f;

  if (argc < 2 || (f = fopen(argv[1], "rb")) == NULL) {
    fprintf(stderr, "skip: no model\n");
    return 77;
  }
  fclose(f);
  printf("specula %s, %s\n", specula_version(), specula_system_info());

  CHECK(strcmp(specula_status_name(SPECULA_ERR_CONTEXT_OVERFLOW), "context_overflow") == 0 &&
            strcmp(specula_status_name(SPECULA_ERR_INTERNAL), "internal") == 0 &&
            strcmp(specula_status_name((specula_status)99), "unknown") == 0,
        "status names");

  /* Bad input: clear errors, no crash. */
  CHECK(specula_model_load(NULL, NULL, &model) == SPECULA_ERR_INVALID_ARGUMENT, "NULL path");
  CHECK(specula_model_load("/no/such/file.gguf", NULL, &model) == SPECULA_ERR_NOT_FOUND && model == NULL, "missing file");
  CHECK(strstr(specula_last_error(), "/no/such/file.gguf") != NULL, "the error names the file: %s", specula_last_error());
  /* A file that is not a model: the caller's input, named. */
  f = fopen("capi_smoke_not_a_model.gguf", "wb");
  if (f != NULL) {
    fputs("root:x:0:0:root:/root:/bin/bash\n", f);
    fclose(f);
    CHECK(specula_model_load("capi_smoke_not_a_model.gguf", NULL, &model) == SPECULA_ERR_INVALID_ARGUMENT &&
              strstr(specula_last_error(), "GGUF") != NULL,
          "not a model: %s", specula_last_error());
    remove("capi_smoke_not_a_model.gguf");
  }
  specula_model_default_params(&mp);
  mp.struct_size = 3;
  CHECK(specula_model_load(argv[1], &mp, &model) == SPECULA_ERR_INVALID_ARGUMENT, "struct_size 3");
  specula_model_default_params(&mp);
  mp.n_parallel = 0;
  CHECK(specula_model_load(argv[1], &mp, &model) == SPECULA_ERR_INVALID_ARGUMENT &&
            strstr(specula_last_error(), "n_parallel") != NULL,
        "n_parallel 0: %s", specula_last_error());

  specula_model_default_params(&mp);
  mp.n_threads = 1;
  mp.n_parallel = 2;
  mp.n_ctx = 1024;
  mp.cache_ram_mib = 0;
  st = specula_model_load(argv[1], &mp, &model);
  if (st != SPECULA_OK) {
    fprintf(stderr, "FAIL load: %s\n", specula_last_error());
    return 1;
  }
  CHECK(specula_model_n_ctx(model) == 1024, "n_ctx %lld", (long long)specula_model_n_ctx(model));
  CHECK(specula_model_n_vocab(model) > 1000, "n_vocab");
  CHECK(specula_model_token_is_eog(model, specula_model_token_eos(model)) == 1, "EOS ends a generation");

  /* Tokens. */
  st = specula_tokenize(model, "Hello, world", 12, 1, 0, &ids, &n_ids);
  CHECK(st == SPECULA_OK && n_ids >= 3 && ids[0] == specula_model_token_bos(model), "tokenize");
  st = specula_detokenize(model, ids, n_ids, 1, 0, &text, NULL);
  CHECK(st == SPECULA_OK && strcmp(text, "Hello, world") == 0, "detokenize: '%s'", text ? text : "(null)");
  specula_free(text);
  specula_free(ids);

  /* A greedy typed request: by callback, then polled: the same tokens. */
  specula_request_default_params(&rp);
  rp.prompt = "The capital of France is";
  rp.max_tokens = 12;
  rp.temperature = 0.0f;
  memset(&by_callback, 0, sizeof by_callback);
  memset(&by_polling, 0, sizeof by_polling);
  fin.struct_size = sizeof fin;
  st = specula_generate(model, &rp, on_update, &by_callback, &fin);
  CHECK(st == SPECULA_OK && fin.finished == 1 && by_callback.n_tokens > 0, "generate: %s", specula_last_error());
  CHECK(fin.n_generated_tokens >= (int64_t)by_callback.n_tokens, "generated counts");
  CHECK(strcmp(fin.finish_reason, "length") == 0 || strcmp(fin.finish_reason, "stop") == 0, "finish %s", fin.finish_reason);
  st = specula_request_start(model, &rp, &req);
  CHECK(st == SPECULA_OK, "request_start: %s", specula_last_error());
  for (;;) {
    specula_request_update u;
    u.struct_size = sizeof u;
    st = specula_request_next(req, 1000, &u);
    if (st == SPECULA_ERR_TIMEOUT) continue;
    CHECK(st == SPECULA_OK, "request_next: %s", specula_last_error());
    if (st != SPECULA_OK) break;
    on_update(&u, &by_polling);
    if (u.finished) break;
  }
  CHECK(by_polling.n_tokens == by_callback.n_tokens &&
            memcmp(by_polling.tokens, by_callback.tokens, by_polling.n_tokens * sizeof(int32_t)) == 0,
        "polled tokens differ from the callback's");
  CHECK(strcmp(by_polling.text, by_callback.text) == 0, "texts: '%s' vs '%s'", by_polling.text, by_callback.text);
  specula_request_free(req);

  /* The same request as the HTTP API's body, in-process: the same text. */
  {
    const char* body = "{\"prompt\": \"The capital of France is\", \"max_tokens\": 12, \"temperature\": 0}";
    st = specula_call_start(model, "POST", "/v1/completions", body, strlen(body), &call);
    CHECK(st == SPECULA_OK, "call_start: %s", specula_last_error());
    ev.struct_size = sizeof ev;
    while ((st = specula_call_next(call, 1000, &ev)) == SPECULA_ERR_TIMEOUT) {
    }
    CHECK(st == SPECULA_OK && ev.http_status == 200 && ev.kind == 1, "call answer %d", ev.http_status);
    {
      /* "text":"<the typed request's text, JSON-escaped>" — compare the first 8 bytes. */
      char want[64];
      snprintf(want, sizeof want, "\"text\":\"%.8s", by_callback.text);
      CHECK(strstr(ev.data, want) != NULL, "call text: %s (want %s)", ev.data, want);
    }
    specula_call_free(call);
  }
  /* An unknown route: 404 in the API's shape. */
  st = specula_call_start(model, "POST", "/no/such/route", NULL, 0, &call);
  CHECK(st == SPECULA_OK, "call_start 404");
  while ((st = specula_call_next(call, 1000, &ev)) == SPECULA_ERR_TIMEOUT) {
  }
  CHECK(st == SPECULA_OK && ev.http_status == 404 && strstr(ev.data, "no route") != NULL, "404");
  specula_call_free(call);

  /* Bad requests: errors naming the field. */
  specula_request_default_params(&rp);
  rp.prompt = "x";
  rp.top_p = 7.0f;
  CHECK(specula_request_start(model, &rp, &req) == SPECULA_ERR_INVALID_ARGUMENT &&
            strstr(specula_last_error(), "top_p") != NULL,
        "top_p 7: %s", specula_last_error());
  specula_request_default_params(&rp);
  CHECK(specula_request_start(model, &rp, &req) == SPECULA_ERR_INVALID_ARGUMENT, "no prompt");

  /* Cancellation: a long request cancelled ends "cancelled"; the row is free again. */
  specula_request_default_params(&rp);
  rp.prompt = "Once upon a time";
  rp.max_tokens = 500;
  rp.ignore_eos = 1;
  st = specula_request_start(model, &rp, &req);
  CHECK(st == SPECULA_OK, "long request");
  {
    /* Partway: after its first tokens. */
    specula_request_update u;
    u.struct_size = sizeof u;
    while ((st = specula_request_next(req, 1000, &u)) == SPECULA_ERR_TIMEOUT) {
    }
    CHECK(st == SPECULA_OK && u.n_tokens > 0 && !u.finished, "first tokens of the long request");
  }
  specula_request_cancel(req);
  for (;;) {
    specula_request_update u;
    u.struct_size = sizeof u;
    st = specula_request_next(req, -1, &u);
    if (st != SPECULA_OK || u.finished) {
      CHECK(st == SPECULA_OK && strcmp(u.finish_reason, "cancelled") == 0, "cancelled: %s",
            st == SPECULA_OK ? u.finish_reason : specula_last_error());
      break;
    }
  }
  specula_request_free(req);
  st = specula_model_stats_json(model, &json);
  CHECK(st == SPECULA_OK && strstr(json, "\"running_rows\":0") != NULL, "stats: %s", json ? json : "");
  specula_free(json);

  specula_model_free(model);
  if (failures == 0) printf("PASS capi_smoke\n");
  return failures == 0 ? 0 : 1;
}
