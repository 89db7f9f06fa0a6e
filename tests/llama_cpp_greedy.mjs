// Greedy continuations from llama.cpp itself, through node-llama-cpp's prebuilt CPU build.
//
//   node tests/llama_cpp_greedy.mjs NODE_MODULES < jobs.json
//
// jobs.json: [{"model": "file.gguf", "ids": [token ids], "count": N, "text": "optional", "bos": optional}, ...]
// prints, one line of JSON: [{"greedy": [the next N ids at temperature 0], "tokens": [llama.cpp's ids of text],
// "bos": [the id llama.cpp puts first, or null; with "bos": true]}, ...]
//
// Speed: one process for every job pays node-llama-cpp's start once (its import, and the
// probe that loads the prebuilt binary in a child process before using it, a second or
// two each). One thread: llama.cpp's default is a thread per core, and its threads spin at
// every barrier, which on a busy two-core machine took a 5-token greedy run from 0.3 s to
// over a minute.
import {readFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const modules = process.argv[2];
const jobs = JSON.parse(readFileSync(0, "utf8"));
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(join(modules, "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false});

const answers = [];
for (const job of jobs) {
  const model = await llama.loadModel({modelPath: job.model, gpuLayers: 0});
  const context = await model.createContext({contextSize: job.ids.length + job.count, threads: 1});
  const greedy = [];
  for await (const token of context.getSequence().evaluate(job.ids, {temperature: 0})) {
    greedy.push(token);
    if (greedy.length >= job.count) break;
  }
  const answer = {greedy};
  if (job.text != null) answer.tokens = model.tokenize(job.text, false);
  // What llama.cpp puts before a text it is given (its tokenizer.ggml.add_bos_token): asked for by "bos": true.
  if (job.bos) answer.bos = model.tokens.shouldPrependBosToken ? model.tokens.bos : null;
  answers.push(answer);
  await context.dispose();
  await model.dispose();
}
console.log(JSON.stringify(answers));
