'use strict';
// specula — the specula engine for Node and Bun (a Node-API addon over libspecula's C API).
//
//   const { Model } = require('specula');
//   const model = await Model.load('model.gguf', { nParallel: 8 });
//   const gen = model.generate({ prompt: 'Once upon a time', maxTokens: 64, temperature: 0 });
//   for await (const ev of gen) process.stdout.write(ev.text);
//   console.log((await gen.result).finishReason);
//
// Many generations at once are batched by the engine (continuous batching, speculative
// decoding, prompt cache); each one's tokens are what it would get alone. An AbortSignal,
// cancel(), or leaving a `for await` early stops a generation (its row is freed within two
// engine steps). index.d.ts has the types.
const path = require('node:path');

let native;
try {
  // SPECULA_NODE_ADDON: another build of the addon (the repository's tests use build/release's).
  native = require(process.env.SPECULA_NODE_ADDON ?? path.join(__dirname, 'build', 'specula.node'));
} catch (e) {
  throw new Error(`specula: the native addon is missing or does not load (${e.message}); build it with ` +
                  '`npm install` (or `npm run build`) in the package folder');
}

class SpeculaError extends Error {
  constructor(message, code, param, status) {
    super(message);
    this.name = 'SpeculaError';
    this.code = code;
    this.param = param ?? null;
    this.status = status ?? null;
  }
}

// A native error (its `code` is the status name) as a SpeculaError.
function wrap(e) {
  if (e instanceof SpeculaError || e instanceof TypeError) return e;
  return new SpeculaError(e.message, e.code ?? 'internal');
}

// Model options: camelCase names of specula_model_params' fields.
const MODEL_OPTIONS = {
  nThreads: ['n_threads', 'int'], nParallel: ['n_parallel', 'int'], nCtx: ['n_ctx', 'int'],
  cacheTypeK: ['cache_type_k', 'string'], cacheTypeV: ['cache_type_v', 'string'], kvDelay: ['kv_delay', 'int'],
  kvBudget: ['kv_budget', 'int'], stepTokens: ['step_tokens', 'int'], maxQueue: ['max_queue', 'int'],
  spec: ['spec', 'string'], draftModel: ['draft_model', 'string'], specDepth: ['spec_depth', 'int'],
  specMaxBatch: ['spec_max_batch', 'int'], specRejection: ['spec_rejection', 'bool'],
  cacheRamMib: ['cache_ram_mib', 'int'], cacheDir: ['cache_dir', 'string'], cacheDiskMib: ['cache_disk_mib', 'int'],
  cacheCheckpoint: ['cache_checkpoint', 'int'], generationCheckpoint: ['generation_checkpoint', 'int'],
  modelId: ['model_id', 'string'], chatTemplate: ['chat_template', 'string'],
  chatTemplateFile: ['chat_template_file', 'string'], quantize: ['quantize', 'string'], pooling: ['pooling', 'string'],
};

function checkType(name, v, type) {
  const ok = type === 'int' ? Number.isInteger(v) : type === 'number' ? typeof v === 'number' && !Number.isNaN(v)
    : type === 'bool' ? typeof v === 'boolean' : type === 'string' ? typeof v === 'string' : true;
  if (!ok) throw new TypeError(`${name} must be ${type === 'int' ? 'an integer' : `a ${type}`}, got ${JSON.stringify(v)}`);
}

function modelParams(options) {
  if (options === null || typeof options !== 'object') throw new TypeError('options must be an object');
  const out = {};
  for (const [k, v] of Object.entries(options)) {
    const spec = MODEL_OPTIONS[k];
    if (!spec) throw new TypeError(`unknown model option '${k}' (known: ${Object.keys(MODEL_OPTIONS).join(', ')})`);
    if (v === undefined || v === null) continue;
    checkType(k, v, spec[1]);
    out[spec[0]] = spec[1] === 'bool' ? (v ? 1 : 0) : v;
  }
  return out;
}

// Generation options: camelCase; unset sampling fields take the model's defaults.
const GEN_OPTIONS = {
  maxTokens: ['max_tokens', 'int'], temperature: ['temperature', 'number'], topP: ['top_p', 'number'],
  topK: ['top_k', 'int'], minP: ['min_p', 'number'], repeatPenalty: ['repeat_penalty', 'number'],
  presencePenalty: ['presence_penalty', 'number'], frequencyPenalty: ['frequency_penalty', 'number'],
  logprobs: ['logprobs', 'int'], ignoreEos: ['ignore_eos', 'bool'], speculative: ['speculative', 'bool'],
  parseSpecial: ['parse_special', 'bool'], grammar: ['grammar', 'string'], regex: ['regex', 'string'],
};
const OTHER_OPTIONS = new Set(['prompt', 'messages', 'tools', 'seed', 'stop', 'jsonSchema', 'options', 'signal']);

function requestParams(o) {
  if (o === null || typeof o !== 'object') throw new TypeError('generate() takes an options object');
  const p = {};
  for (const [k, v] of Object.entries(o)) {
    if (v === undefined) continue;
    const spec = GEN_OPTIONS[k];
    if (spec) {
      checkType(k, v, spec[1]);
      p[spec[0]] = v;
    } else if (!OTHER_OPTIONS.has(k)) {
      throw new TypeError(`unknown generation option '${k}'`);
    }
  }
  if ((o.prompt === undefined) === (o.messages === undefined)) throw new TypeError('give a prompt or messages (one of them)');
  if (typeof o.prompt === 'string') p.prompt = o.prompt;
  else if (o.prompt !== undefined) {
    if (!(Array.isArray(o.prompt) || o.prompt instanceof Int32Array) || ![...o.prompt].every(Number.isInteger))
      throw new TypeError('prompt must be a string or an array of token ids');
    p.promptTokens = Int32Array.from(o.prompt);
  }
  if (o.messages !== undefined) {
    if (!Array.isArray(o.messages)) throw new TypeError('messages must be an array');
    p.messagesJson = JSON.stringify(o.messages);
  }
  if (o.tools !== undefined) {
    if (!Array.isArray(o.tools)) throw new TypeError('tools must be an array');
    p.toolsJson = JSON.stringify(o.tools);
  }
  if (o.seed !== undefined) {
    if (!(Number.isInteger(o.seed) && o.seed >= 0) && typeof o.seed !== 'bigint')
      throw new TypeError('seed must be a non-negative integer or a bigint');
    p.seed = BigInt(o.seed);
  }
  if (o.stop !== undefined) {
    const stop = typeof o.stop === 'string' ? [o.stop] : o.stop;
    if (!Array.isArray(stop) || !stop.every((s) => typeof s === 'string')) throw new TypeError('stop must be a string or strings');
    p.stop = stop;
  }
  if (o.jsonSchema !== undefined) p.json_schema = JSON.stringify(o.jsonSchema);
  if (o.options !== undefined) {
    if (o.options === null || typeof o.options !== 'object') throw new TypeError('options must be an object');
    p.options_json = JSON.stringify(o.options);
  }
  if (o.signal !== undefined && !(o.signal && typeof o.signal.addEventListener === 'function'))
    throw new TypeError('signal must be an AbortSignal');
  return p;
}

// Stops and frees the native request of a generation nobody holds any more.
const abandoned = new FinalizationRegistry((handle) => {
  try { handle.close(); } catch { /* already closed */ }
});

class Generation {
  constructor(handle, signal, model) {
    this._handle = handle;
    this._model = model;  // kept: a model collected while it runs would cancel it
    this._text = [];
    this._tokens = [];
    this._logprobs = null;
    this._final = null;
    this._consuming = false;
    this._resultPromise = null;
    this._chain = Promise.resolve();
    abandoned.register(this, handle, this);
    if (signal) {
      if (signal.aborted) this.cancel();
      else {
        this._onAbort = () => this.cancel();
        signal.addEventListener('abort', this._onAbort, { once: true });
        this._signal = signal;
      }
    }
  }

  // The next update with something in it, or null at the end.
  async _next() {
    while (this._final === null) {
      let u;
      try {
        u = await this._handle.next();
      } catch (e) {
        throw wrap(e);
      }
      if (u === null) continue;  // a bounded wait ended with nothing new
      this._text.push(u.text);
      for (const t of u.tokens) this._tokens.push(t);
      if (u.logprobs) this._logprobs = (this._logprobs ?? []).concat(Array.from(u.logprobs));
      if (u.finished) {
        this._final = {
          text: this._text.join(''), tokens: this._tokens, finishReason: u.finishReason, stopSequence: u.stopSequence,
          error: u.error, promptTokens: u.promptTokens, cachedTokens: u.cachedTokens,
          completionTokens: u.completionTokens, draftedTokens: u.draftedTokens, acceptedTokens: u.acceptedTokens,
          queueSeconds: u.queueSeconds, prefillSeconds: u.prefillSeconds, decodeSeconds: u.decodeSeconds,
          seed: u.seed, logprobs: this._logprobs,
        };
        this._finish();
      }
      if (u.tokens.length > 0 || u.text.length > 0)
        return { tokens: Array.from(u.tokens), text: u.text, logprobs: u.logprobs ? Array.from(u.logprobs) : null };
    }
    return null;
  }

  _finish() {
    if (this._signal) this._signal.removeEventListener('abort', this._onAbort);
    abandoned.unregister(this);
    this._handle.close();
  }

  // _next() one at a time: the iterator and `result` may both ask.
  _serial() {
    const p = this._chain.then(() => this._next());
    this._chain = p.catch(() => {});
    return p;
  }

  async *[Symbol.asyncIterator]() {
    if (this._consuming) throw new Error('a generation is iterated once');
    this._consuming = true;
    try {
      for (;;) {
        const ev = await this._serial();
        if (ev === null) return;
        yield ev;
      }
    } finally {
      if (this._final === null) this.cancel();  // left early (break, throw): the request goes
    }
  }

  // How it ended; reads (and drops) the events the iterator has not taken.
  get result() {
    if (this._resultPromise === null) {
      this._resultPromise = (async () => {
        while ((await this._serial()) !== null) { /* drain */ }
        return this._final;
      })();
    }
    return this._resultPromise;
  }

  cancel() {
    try { this._handle.cancel(); } catch { /* closed */ }
  }
}

// A call's answer: a whole JSON body, or (stream: true) an async iterable of its events.
async function* callEvents(call, model) {  // eslint-disable-line no-unused-vars -- model: kept alive
  try {
    for (;;) {
      const ev = await call.next();
      if (ev === undefined) return;
      if (ev === null) continue;
      if (ev.kind === 1) {
        if (ev.status !== 200) throw httpError(ev.status, ev.data);
        yield JSON.parse(ev.data);
        return;
      }
      if (ev.kind === 3) return;
      if (ev.data === '[DONE]') continue;
      const chunk = JSON.parse(ev.data);
      if (chunk && chunk.error && !chunk.choices) throw httpError(chunk.error.type === 'invalid_request_error' ? 400 : 503, ev.data);
      yield chunk;
    }
  } finally {
    call.close();
  }
}

function httpError(status, data) {
  let message = data, code = 'error', param = null;
  try {
    const e = JSON.parse(data).error ?? {};
    message = e.message ?? data;
    code = e.code ?? e.type ?? 'error';
    param = e.param ?? null;
  } catch { /* not JSON */ }
  return new SpeculaError(message, code, param, status);
}

class Model {
  constructor(handle, path) {
    this._native = handle;
    this.path = path;
    const n = handle.numbers();
    this.id = n.id;
    this.nCtx = n.nCtx;
    this.nVocab = n.nVocab;
    this.nEmbd = n.nEmbd;
    this.tokenBos = n.tokenBos;
    this.tokenEos = n.tokenEos;
  }

  // Loads a GGUF file or a model folder and starts its engine (off the main thread).
  static async load(path, options = {}) {
    if (typeof path !== 'string') throw new TypeError('path must be a string');
    const params = modelParams(options);
    try {
      return new Model(await native.loadModel(path, params), path);
    } catch (e) {
      throw wrap(e);
    }
  }

  generate(options) {
    const p = requestParams(options);
    let handle;
    try {
      handle = this._native.startRequest(p);
    } catch (e) {
      throw wrap(e);
    }
    return new Generation(handle, options.signal, this);
  }

  tokenize(text, { addSpecial = true, parseSpecial = false } = {}) {
    if (typeof text !== 'string') throw new TypeError('text must be a string');
    try { return Array.from(this._native.tokenize(text, addSpecial, parseSpecial)); } catch (e) { throw wrap(e); }
  }

  detokenize(tokens, { renderSpecial = false } = {}) {
    if (!(Array.isArray(tokens) || tokens instanceof Int32Array) || ![...tokens].every(Number.isInteger))
      throw new TypeError('tokens must be an array of token ids');
    try { return this._native.detokenize(Int32Array.from(tokens), renderSpecial); } catch (e) { throw wrap(e); }
  }

  applyChatTemplate(messages, tools) {
    if (!Array.isArray(messages)) throw new TypeError('messages must be an array');
    try {
      return this._native.applyChatTemplate(JSON.stringify(messages), tools === undefined ? undefined : JSON.stringify(tools));
    } catch (e) { throw wrap(e); }
  }

  // Embeddings (/v1/embeddings): a vector for a string, vectors for strings.
  async embed(input, { normalize = true } = {}) {
    const single = typeof input === 'string';
    if (!single && !(Array.isArray(input) && input.every((s) => typeof s === 'string')))
      throw new TypeError('input must be a string or strings');
    const answer = await this.call('/v1/embeddings', { input: single ? [input] : input, normalize });
    const vectors = answer.data.map((d) => d.embedding);
    return single ? vectors[0] : vectors;
  }

  // Any route of the HTTP API in-process (docs/API.md): the answer's JSON, or with
  // body.stream an async iterable of its events.
  call(path, body, method = 'POST') {
    let c;
    try {
      c = this._native.startCall(method, path, body === undefined ? null : JSON.stringify(body));
    } catch (e) {
      throw wrap(e);
    }
    const events = callEvents(c, this);
    if (body && body.stream) return events;
    return (async () => {
      for await (const ev of events) return ev;
      throw new SpeculaError('the call ended without an answer', 'internal');
    })();
  }

  info() { return JSON.parse(this._native.infoJson()); }
  stats() { return JSON.parse(this._native.statsJson()); }
  // LoRA adapters (GGUF LoRA files or PEFT folders): requests select one with
  // call(..., {model: name}) or {lora: [{id, scale}]}; `scale` is its global scale (requests
  // that select nothing run with the adapters whose scale is not 0). Returns its id.
  loraLoad(path, { name = null, scale = 0 } = {}) {
    try { return this._native.loraLoad(path, name, scale); } catch (e) { throw wrap(e); }
  }
  loraUnload(name) {
    try { this._native.loraUnload(name); } catch (e) { throw wrap(e); }
  }
  loraAdapters() {
    try { return JSON.parse(this._native.loraListJson()); } catch (e) { throw wrap(e); }
  }
  // Cancels the running generations; the model's memory goes once they are all gone.
  close() { this._native.close(); }
}

module.exports = { Model, Generation, SpeculaError, version: native.version, systemInfo: native.systemInfo };
