// Types of the `specula` package (index.js).

/** Model options: the fields of the C API's specula_model_params (docs/API.md, "The library"). */
export interface ModelOptions {
  /** Compute threads; 0: all cores. */
  nThreads?: number;
  /** Generations decoded together (state rows), 1..256; default 4. */
  nParallel?: number;
  /** Tokens all running generations hold together (llama-server's -c); 0: 4096 per row. */
  nCtx?: number;
  /** K / V cache types: "f16" (default), "q8_0", "q4_0", "tq3".."tq5". */
  cacheTypeK?: string;
  cacheTypeV?: string;
  kvDelay?: number;
  kvBudget?: number;
  stepTokens?: number;
  maxQueue?: number;
  /** Speculative decoding: "ngram", "draft" (with draftModel), "none". */
  spec?: string;
  draftModel?: string;
  specDepth?: number;
  specMaxBatch?: number;
  specRejection?: boolean;
  /** Prompt cache in RAM, MiB; -1: default; 0: off. */
  cacheRamMib?: number;
  cacheDir?: string;
  cacheDiskMib?: number;
  cacheCheckpoint?: number;
  generationCheckpoint?: number;
  modelId?: string;
  /** A Jinja chat template replacing the model's own. */
  chatTemplate?: string;
  chatTemplateFile?: string;
  quantize?: 'q8_0' | 'q4_k';
  pooling?: 'mean' | 'last';
}

export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool';
  content: string | null | Array<{ type: string; text?: string }>;
  [key: string]: unknown;
}

/** One generation: a prompt (text, or token ids used as given) or chat messages. Unset
 * sampling fields take the model's defaults. */
export interface GenerateOptions {
  prompt?: string | number[] | Int32Array;
  messages?: ChatMessage[];
  tools?: unknown[];
  /** Tokens to generate at most; unset: until the context is full. */
  maxTokens?: number;
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  repeatPenalty?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  seed?: number | bigint;
  stop?: string | string[];
  /** Each token's logprob (natural log, temperature 1). */
  logprobs?: number;
  ignoreEos?: boolean;
  speculative?: boolean;
  parseSpecial?: boolean;
  /** Structured output: one of a GBNF grammar, a JSON schema, a regular expression. */
  grammar?: string;
  jsonSchema?: object;
  regex?: string;
  /** Any other field of the API's request body (docs/API.md), by its JSON name. */
  options?: Record<string, unknown>;
  /** Aborting it stops the generation; its row is freed within two engine steps. */
  signal?: AbortSignal;
}

export interface TokenEvent {
  /** Token ids generated since the last event (an end-of-generation token not included). */
  tokens: number[];
  /** Text released since the last event (what could begin a stop string is held back). */
  text: string;
  logprobs: number[] | null;
}

export interface Completion {
  text: string;
  tokens: number[];
  finishReason: 'stop' | 'length' | 'cancelled' | 'failed';
  stopSequence: string | null;
  error: string | null;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  draftedTokens: number;
  acceptedTokens: number;
  queueSeconds: number;
  prefillSeconds: number;
  decodeSeconds: number;
  seed: bigint;
  logprobs: number[] | null;
}

export class Generation implements AsyncIterable<TokenEvent> {
  [Symbol.asyncIterator](): AsyncIterator<TokenEvent>;
  /** How it ended (reads the events nobody iterated). */
  readonly result: Promise<Completion>;
  cancel(): void;
}

export class SpeculaError extends Error {
  /** The status name: "invalid_argument", "context_overflow", "busy", ... or an API error code. */
  code: string;
  param: string | null;
  status: number | null;
}

export class Model {
  static load(path: string, options?: ModelOptions): Promise<Model>;
  readonly path: string;
  readonly id: string;
  readonly nCtx: number;
  readonly nVocab: number;
  readonly nEmbd: number;
  readonly tokenBos: number;
  readonly tokenEos: number;
  generate(options: GenerateOptions): Generation;
  tokenize(text: string, options?: { addSpecial?: boolean; parseSpecial?: boolean }): number[];
  detokenize(tokens: number[] | Int32Array, options?: { renderSpecial?: boolean }): string;
  applyChatTemplate(messages: ChatMessage[], tools?: unknown[]): string;
  embed(input: string, options?: { normalize?: boolean }): Promise<number[]>;
  embed(input: string[], options?: { normalize?: boolean }): Promise<number[][]>;
  /** A route of the HTTP API in-process: its JSON answer, or with body.stream its events. */
  call(path: string, body?: Record<string, unknown>, method?: string): Promise<any> | AsyncIterable<any>;
  info(): Record<string, unknown>;
  stats(): { running_rows: number; queue_depth: number; steps: number; [key: string]: unknown };
  /** Loads a LoRA adapter (GGUF LoRA file or PEFT folder); returns its id. Requests select it
   * with call(path, {model: name}) or {lora: [{id, scale}]}; `scale` is its global scale. */
  loraLoad(path: string, options?: { name?: string | null; scale?: number }): number;
  loraUnload(name: string): void;
  loraAdapters(): { id: number; name: string; path: string; scale: number }[];
  close(): void;
}

export const version: string;
export const systemInfo: string;
