// llama.cpp's single-stream decoding on a GGUF file, timed in the process's CPU
// seconds (node-llama-cpp's prebuilt CPU build; benchmarks/bench_smollm2.py runs it).
//
//   NODE_PATH=$ZOO_REFERENCES/node-llama-cpp/node_modules node benchmarks/llama_cpp_decode.mjs MODEL.gguf THREADS TOKENS PROMPT
//
// Prints one JSON line: tokens drawn greedily after the prompt, CPU and wall
// seconds of the drawing alone (loading and the prompt are not timed), the CPU
// seconds of reading the prompt (its tokens evaluated at once, up to the first
// drawn token) and its token count, peak RSS.
import { createRequire } from "node:module";
import path from "node:path";

const [modelPath, threads, tokens, prompt] = process.argv.slice(2);
// node resolves bare imports from the script's folder, not NODE_PATH: ask require where the package is
const require = createRequire(path.join(process.env.NODE_PATH, "noop.js"));
const { getLlama } = await import(require.resolve("node-llama-cpp"));

const llama = await getLlama({ gpu: false, build: "never" });
const model = await llama.loadModel({ modelPath });
const promptTokens = model.tokenize(prompt);
const size = Math.max(512, promptTokens.length + Number(tokens) + 1);
const context = await model.createContext({ threads: Number(threads), contextSize: size, batchSize: size });
const sequence = context.getSequence();
const drawn = [];
let cpu, wall, promptCpu;
const reading = process.cpuUsage();
for await (const token of sequence.evaluate(promptTokens, { temperature: 0 })) {
  if (drawn.length === 0) { // the prompt is read: time the tokens after the first
    const read = process.cpuUsage(reading);
    promptCpu = (read.user + read.system) / 1e6;
    cpu = process.cpuUsage();
    wall = process.hrtime.bigint();
  }
  drawn.push(token);
  if (drawn.length > Number(tokens)) break;
}
const used = process.cpuUsage(cpu);
const seconds = Number(process.hrtime.bigint() - wall) / 1e9;
console.log(JSON.stringify({
  tokens: drawn.slice(1).length,
  cpu_seconds: (used.user + used.system) / 1e6,
  wall_seconds: seconds,
  prompt_tokens: promptTokens.length,
  prompt_cpu_seconds: promptCpu,
  text: model.detokenize(drawn),
  peak_rss_bytes: process.resourceUsage().maxRSS * 1024,
}));
await context.dispose();
await model.dispose();
await llama.dispose();
