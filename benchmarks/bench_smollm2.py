"""SmolLM2-135M: single-stream decoding beside the machine's limit and its peers, in one run.

    ZOO_REFERENCES=/path/to/references .venv/bin/python -m benchmarks.bench_smollm2 [--rounds 5] [--tokens 32] [--threads 1]

The GGUF file is `make references`' ``SmolLM2-135M-Instruct.Q4_1.gguf`` ($ZOO_REFERENCES,
else .references/). The zoo gets it through `zoo import gguf`, transformers
through its own GGUF loader: both dequantise the same bytes to the same float32
weights. Everything is timed in CPU
seconds of the process that computes (this machine is shared: wall-clock time
would count the neighbours' work), on ``--threads`` threads for every side:

- the floor: the memory roofline (bandwidth of a 256 MiB tensor copy ÷ the bytes of
  weights one token reads), and the 121 matrix-vector products of one token alone,
  in float32 and as Q8_0 blocks through the zoo's PackedLinear and C kernel (what
  ``--quantize int8`` makes of each linear layer);
- greedy decoding of ``--tokens`` tokens after a short prompt (the prompt not timed):
  the zoo in float32, the zoo with ``--quantize int8``, transformers' ``generate``
  and llama.cpp (node-llama-cpp's prebuilt CPU build, benchmarks/llama_cpp_decode.mjs)
  on the GGUF file itself; the sides alternate, the order reversing every round,
  and the ratios to transformers are taken round by round;
- `zoo load` in a fresh process twice (the first verifies the file, the second maps
  it), seconds after ``import torch``, and the peak RSS of loading and of decoding;
- int8's quality cost as llama.cpp states it: perplexity of both and the mean KL
  divergence of int8's next-token distributions from float32's, over a fixed text.

The table goes into docs/benchmarks.md (section "smollm2") with the machine's load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import ROOT, load_text, machine_load, median_interval, spread, write_section
from benchmarks.gguf_decoding import greedy_decoder, import_once

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2-135m-instruct"
PROMPT = "The capital of France is"
# The fixed text of the quality figures: the opening of Tiny Shakespeare's validation
# split (the last tenth of the file the zoo ships), 4,000 characters.
QUALITY_CHARS = 4000
NODE_SCRIPT = ROOT / "benchmarks" / "llama_cpp_decode.mjs"


def references() -> Path:
    # Absolute: node resolves a relative NODE_PATH against its own working folder.
    return Path(os.environ.get("ZOO_REFERENCES") or ROOT / ".references").resolve()


def per_cpu_second(run, tokens: int) -> float:
    began = time.process_time()
    run()
    return tokens / (time.process_time() - began)


def floor(threads: int) -> dict:
    """The roofline and the products alone, on random weights of SmolLM2's shapes."""
    import gguf

    from zoo_core.loading.packed_modules import PackedLinear

    torch.manual_seed(0)
    shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)] * 30 + [(49152, 576)]  # qkv, proj, up, down; head
    weights = [torch.randn(*shape) for shape in shapes]
    inputs = {576: torch.randn(1, 576), 1536: torch.randn(1, 1536)}
    q8_0 = gguf.GGMLQuantizationType.Q8_0
    int8 = []
    for weight in weights:
        linear = PackedLinear(weight.shape[1], weight.shape[0], q8_0, None)
        linear.weight = torch.from_numpy(gguf.quants.quantize(weight.numpy(), q8_0))
        int8.append(linear)
    source = torch.empty(64 * 1024 * 1024)  # 256 MiB, far beyond the caches
    target = torch.empty_like(source)
    target.copy_(source)
    copy_seconds = min(timed_cpu(lambda: target.copy_(source)) for _ in range(5))
    bandwidth = 2 * source.numel() * 4 / copy_seconds  # read and written
    float_bytes = sum(w.numel() for w in weights) * 4
    int8_bytes = sum(m.weight.numel() for m in int8)  # Q8_0: 34 bytes per 32 values
    with torch.inference_mode():
        float_seconds = min(
            timed_cpu(lambda: [torch.nn.functional.linear(inputs[w.shape[1]], w) for w in weights]) for _ in range(5)
        )
        int8_seconds = min(timed_cpu(lambda: [m(inputs[m.in_features]) for m in int8]) for _ in range(5))
    return {
        "threads": threads,
        "copy_bandwidth_gb_per_s": bandwidth / 1e9,
        "float32_weight_bytes_per_token": float_bytes,
        "roofline_float32_tokens_per_s": bandwidth / float_bytes,
        "roofline_int8_tokens_per_s": bandwidth / int8_bytes,
        "matvecs_float32_tokens_per_s": 1 / float_seconds,
        "matvecs_int8_tokens_per_s": 1 / int8_seconds,
    }


def timed_cpu(run) -> float:
    began = time.process_time()
    run()
    return time.process_time() - began


def llama_cpp(gguf: Path, threads: int, tokens: int, prompt: str = PROMPT) -> dict:
    modules = references() / "node-llama-cpp" / "node_modules"
    done = subprocess.run(
        ["node", str(NODE_SCRIPT), str(gguf), str(threads), str(tokens), prompt],
        env={**os.environ, "NODE_PATH": str(modules)},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# Peak RSS from VmHWM, the new program's own: ru_maxrss would carry the benchmark's own peak over the fork.
LOAD_SCRIPT = """
import json, re, sys, time
def peak():
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
began = time.perf_counter()
import torch
torch.set_num_threads({threads})
after_torch, cpu_after_torch = time.perf_counter(), time.process_time()
import zoo_core
from zoo_core.inference.sampling import sample_tokens
model = zoo_core.load({name!r}, quantize={quantize!r})
loaded = {{"seconds_after_torch": time.perf_counter() - after_torch,
          "cpu_seconds_after_torch": time.process_time() - cpu_after_torch,
          "verified_before": model.verification.verified_before,
          "load_peak_rss_bytes": peak()}}
ids = torch.tensor([model.tokenizer.encode({prompt!r})])
sample_tokens(model.network, ids, 16, temperature=0)
loaded["decode_peak_rss_bytes"] = peak()
print(json.dumps(loaded))
"""


def load_in_fresh_process(env: dict, threads: int, quantize: str | None) -> dict:
    script = LOAD_SCRIPT.format(threads=threads, name=NAME, quantize=quantize, prompt=PROMPT)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def quality(full, int8) -> dict:
    """Perplexity of both and int8's mean KL divergence from float32 on the fixed text."""
    text = (ROOT / "data" / "tinyshakespeare.txt").read_text()
    split = int(len(text) * 0.9)
    ids = torch.tensor([full.tokenizer.encode(text[split : split + QUALITY_CHARS])])
    with torch.inference_mode():
        expected = torch.log_softmax(full.network(ids)[0][0, :-1], dim=-1)
        found = torch.log_softmax(int8.network(ids)[0][0, :-1], dim=-1)
    targets = ids[0, 1:]
    nll = [-float(lp.gather(-1, targets[:, None]).mean()) for lp in (expected, found)]
    kl = (expected.exp() * (expected - found)).sum(dim=-1)
    return {
        "tokens": int(targets.numel()),
        "perplexity_float32": float(torch.tensor(nll[0]).exp()),
        "perplexity_int8": float(torch.tensor(nll[1]).exp()),
        "kl_mean": float(kl.mean()),
        "kl_99th_percentile": float(kl.quantile(0.99)),
        "same_top_token": float((expected.argmax(-1) == found.argmax(-1)).float().mean()),
    }


def measure(rounds: int, tokens: int, threads: int, work: Path) -> dict:
    gguf = references() / GGUF
    if not gguf.exists():
        raise SystemExit(f"{gguf} is missing: `make references` fetches it")
    env = {**os.environ, "ZOO_HOME": str(work / "home"), "ZOO_CACHE": str(work / "cache")}
    # float32, as transformers dequantises the file: the import keeps the file's blocks
    # unless told (benchmarks/bench_quantized.py measures those), and --quantize int8 needs float weights
    import_once(gguf, env, NAME, "--dequantize")
    shutil.rmtree(work / "cache" / "verified", ignore_errors=True)  # so that the first load below verifies in full
    loads = {
        kind: [load_in_fresh_process(env, threads, quantize) for _ in range(2)]
        for kind, quantize in (("float32", None), ("int8", "int8"))
    }
    os.environ.update(ZOO_HOME=env["ZOO_HOME"], ZOO_CACHE=env["ZOO_CACHE"])
    torch.set_num_threads(threads)
    from transformers import AutoModelForCausalLM

    import zoo_core

    full, int8 = zoo_core.load(NAME), zoo_core.load(NAME, quantize="int8")
    # transformers dequantises the same file to the same float32 values with its own GGUF loader
    hf = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    ids = torch.tensor([full.tokenizer.encode(PROMPT)])
    texts = {}

    def zoo_side(model, key):
        decode = greedy_decoder(model, ids, tokens)  # the prompt and first token untimed, as for the peers

        def run():
            rate, drawn = decode()
            texts[key] = full.tokenizer.decode(drawn)
            return rate

        return run

    def transformers_side():
        with torch.inference_mode():
            out = hf.generate(ids, max_new_tokens=1, do_sample=False)  # the prompt, as for the others
            began = time.process_time()
            out = hf.generate(ids, max_new_tokens=tokens + 1, min_new_tokens=tokens + 1, do_sample=False)
            seconds = time.process_time() - began
        texts["transformers"] = full.tokenizer.decode(out[0, ids.shape[1] :].tolist())
        return tokens / seconds

    def llama_side():
        result = llama_cpp(gguf, threads, tokens)
        texts["llama.cpp (Q4_1)"] = result["text"]
        return result["tokens"] / result["cpu_seconds"]

    sides = {
        "zoo float32": zoo_side(full, "zoo float32"),
        "zoo int8": zoo_side(int8, "zoo int8"),
        "transformers generate": transformers_side,
        "llama.cpp (Q4_1)": llama_side,
    }
    sides["zoo float32"]()  # the first token through every weight pages the mapped file in
    runs: dict[str, list[float]] = {side: [] for side in sides}
    floors = []
    for round_ in range(rounds):
        floors.append(floor(threads))
        for side in list(sides) if round_ % 2 == 0 else list(reversed(sides)):
            runs[side].append(sides[side]())
    transformers = runs["transformers generate"]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "rounds": rounds,
        "tokens": tokens,
        "threads": threads,
        "load_average": machine_load(),
        "floor": {key: spread([f[key] for f in floors]) for key in floors[0]},
        "tokens_per_cpu_second": {side: spread(values) for side, values in runs.items()},
        "over_transformers": {
            side: median_interval([a / b for a, b in zip(values, transformers)]) for side, values in runs.items()
        },
        "loads": loads,
        "quality": quality(full, int8),
        "texts": texts,
    }


def table(report: dict, command: str) -> str:
    floor_, speed, ratio, q = (
        report["floor"],
        report["tokens_per_cpu_second"],
        report["over_transformers"],
        report["quality"],
    )

    def figure(values, fmt=".1f"):
        return f"{values['median']:{fmt}} ({values['min']:{fmt}}–{values['max']:{fmt}})"

    def interval(values):
        return f"{values['median']:.2f}× ({values['low']:.2f}–{values['high']:.2f})"

    lines = [
        "<!-- smollm2: begin -->",
        "## SmolLM2-135M: single-stream decoding against the machine's limit and its peers",
        "",
        f"`{command}` on {report['date']}: {report['rounds']} rounds of {report['tokens']} greedy tokens after "
        f"the prompt {PROMPT!r}, {report['threads']} thread(s) for every side, tokens per CPU second of the "
        f"computing process (median, range over rounds); ratios to transformers taken round by round, median "
        f"and 95% interval. Machine load (1/5/15 min) at the end: {load_text(report['load_average'])}. "
        "The zoo's model came by `zoo import gguf`, transformers' by its own GGUF loader.",
        "",
        "| | tokens / CPU second | × transformers |",
        "| --- | --- | --- |",
        f"| memory roofline, float32 weights (copy at {figure(floor_['copy_bandwidth_gb_per_s'])} GB/s "
        f"÷ {floor_['float32_weight_bytes_per_token']['median'] / 1e6:.0f} MB) "
        f"| {figure(floor_['roofline_float32_tokens_per_s'])} | |",
        f"| memory roofline, int8 weights | {figure(floor_['roofline_int8_tokens_per_s'])} | |",
        f"| the 121 matrix-vector products alone, float32 | {figure(floor_['matvecs_float32_tokens_per_s'])} | |",
        f"| the 121 matrix-vector products alone, int8 (fbgemm) | {figure(floor_['matvecs_int8_tokens_per_s'])} | |",
    ]
    for side in speed:
        lines.append(f"| {side} | {figure(speed[side])} | {interval(ratio[side])} |")
    lines += ["", "| load, fresh process | seconds after `import torch` (CPU) | peak RSS loading | peak RSS decoding |"]
    lines.append("| --- | --- | --- | --- |")
    for kind, runs in report["loads"].items():
        for run in runs:
            which = "second (mapped, verified before)" if run["verified_before"] else "first (verifies the file)"
            lines.append(
                f"| {kind}, {which} | {run['seconds_after_torch']:.2f} ({run['cpu_seconds_after_torch']:.2f}) | "
                f"{run['load_peak_rss_bytes'] / 2**20:,.0f} MiB | {run['decode_peak_rss_bytes'] / 2**20:,.0f} MiB |"
            )
    lines += [
        "",
        f"int8's quality cost, as llama.cpp states it, over {q['tokens']} tokens of Tiny Shakespeare's validation "
        f"text: perplexity {q['perplexity_float32']:.3f} in float32, {q['perplexity_int8']:.3f} in int8; mean KL "
        f"divergence of int8 from float32 {q['kl_mean']:.5f} nats (99th percentile {q['kl_99th_percentile']:.5f}); "
        f"the same most likely token at {100 * q['same_top_token']:.1f}% of positions.",
        "<!-- smollm2: end -->",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", type=Path, help="scratch folder kept between runs (default: a temporary one)")
    parser.add_argument("--no-write", action="store_true", help="print, leave docs/benchmarks.md as it is")
    args = parser.parse_args()
    command = "python -m benchmarks.bench_smollm2 " + " ".join(
        f"--{k} {v}" for k, v in (("rounds", args.rounds), ("tokens", args.tokens), ("threads", args.threads))
    )
    with tempfile.TemporaryDirectory() as scratch:
        report = measure(args.rounds, args.tokens, args.threads, args.work or Path(scratch))
    print(json.dumps(report, indent=1))
    if not args.no_write:
        write_section("smollm2", table(report, command))


if __name__ == "__main__":
    main()
