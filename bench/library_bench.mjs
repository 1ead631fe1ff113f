// bench/library_bench.mjs — one round of bench/library_bench.py's work from JS: N concurrent
// greedy generations (distinct prompts, ignoring EOS) on one Model, loaded once; prints one
// JSON line per round: {"rate": generated tokens per second, "texts": [...]}.
//   node bench/library_bench.mjs MODEL N TOKENS ROUNDS THREADS PROMPTS_JSON
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { Model } = require(path.join(root, 'js', 'index.js'));
const [model, n, tokens, rounds, threads, promptsJson] = process.argv.slice(2);
const prompts = JSON.parse(promptsJson).slice(0, Number(n));
const m = await Model.load(model, { nParallel: Number(n), nCtx: Number(n) * 1024, nThreads: Number(threads), cacheRamMib: 0 });
process.stdout.write('ready\n');
for (let r = 0; r < Number(rounds); ++r) {
  await new Promise((resolve) => process.stdin.once('data', resolve));  // the Python side says when
  const t0 = performance.now();
  const done = await Promise.all(prompts.map((p) => m.generate({ prompt: p, maxTokens: Number(tokens), temperature: 0, ignoreEos: true }).result));
  const dt = (performance.now() - t0) / 1000;
  const total = done.reduce((s, c) => s + c.completionTokens, 0);
  process.stdout.write(JSON.stringify({ rate: total / dt, texts: done.map((c) => c.text) }) + '\n');
}
m.close();
process.exit(0);  // stdin stays open otherwise
