// llama.cpp's log-probability of every next token of fixed windows of token ids, on a
// GGUF file (node-llama-cpp's prebuilt CPU build; benchmarks/bench_quant_quality.py runs it).
//
//   NODE_PATH=$ZOO_REFERENCES/node-llama-cpp/node_modules node benchmarks/llama_cpp_logprobs.mjs MODEL.gguf THREADS WINDOWS.json
//
// WINDOWS.json: a list of windows, each a list of token ids (the zoo's tokenizer's,
// the same as the file's vocabulary). Each window is read from an empty sequence;
// after every token but the last, node-llama-cpp's `controlledEvaluate` hands back the
// next-token probabilities over the whole vocabulary (`generateNext.probabilities`,
// the model's softmax at temperature 1 with no top-k, top-p or min-p cut), and the
// next id's is kept. Prints one JSON line: {"log_probs": [[...], ...], "top": [[...], ...],
// "peak_rss_bytes": N}; the natural logarithms, and each position's most likely id.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const [modelPath, threads, windowsPath] = process.argv.slice(2);
const windows = JSON.parse(readFileSync(windowsPath, "utf8"));
// node resolves bare imports from the script's folder, not NODE_PATH: ask require where the package is
const require = createRequire(path.join(process.env.NODE_PATH, "noop.js"));
const { getLlama } = await import(require.resolve("node-llama-cpp"));

const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath });
const longest = Math.max(...windows.map((w) => w.length));
const context = await model.createContext({ threads: Number(threads), contextSize: longest, batchSize: longest });
// the plain softmax: temperature 1 and every cut that a sampler could apply switched off
const plain = { temperature: 1, topK: 0, topP: 1, minP: 0, seed: 0 };
const sequence = context.getSequence();
const logProbs = [];
const top = [];
for (const window of windows) {
  await sequence.clearHistory(); // each window from an empty cache
  const input = window.map((token, i) =>
    i < window.length - 1 ? [token, { generateNext: { probabilities: true, options: plain } }] : token,
  );
  const results = await sequence.controlledEvaluate(input);
  const mine = [];
  const best = [];
  for (let i = 0; i < window.length - 1; i++) {
    const probabilities = results[i].next.probabilities;
    mine.push(Math.log(probabilities.get(window[i + 1]) ?? 0));
    best.push(probabilities.keys().next().value); // the map is sorted, most likely first
  }
  logProbs.push(mine);
  top.push(best);
}
console.log(JSON.stringify({ log_probs: logProbs, top, peak_rss_bytes: process.resourceUsage().maxRSS * 1024 }));
await context.dispose();
await model.dispose();
await llama.dispose();
