"""GGUF weights kept as the file gives them: the kernels, decoding against llama.cpp, size and memory.

    ZOO_REFERENCES=/path/to/references .venv/bin/python -m benchmarks.bench_quantized [--rounds 3] [--tokens 32]

On SmolLM2-135M-Instruct's Q4_1 file (`make references`), in one run, every figure
in CPU seconds of the computing process (the machine is shared), on 1 and 2 threads:

- the floor: memory copy bandwidth (a 256 MiB tensor copied) and the roofline it
  gives (bandwidth ÷ bytes of weights one token reads); then the candidate
  matrix-vector kernels alone on SmolLM2's shapes for one token (30 layers of
  query-key-value 960×576, output 576×576, gate-up 3072×576, down 576×1536, and the
  49152×576 head): float32 `F.linear`, torch.ao's dynamic int8 (fbgemm: ``--quantize
  int8`` before issue 54, the speed the issue holds the packed kernel to), torch's packed ``_weight_int8pack_mm`` and
  ``_weight_int4pack_mm_for_cpu``, dequantise-per-call then `F.linear`, and the
  zoo's C kernel on Q4_1, Q4_0 and Q8_0 blocks;
- greedy decoding of ``--tokens`` tokens after a short prompt (the prompt not
  timed): the zoo on the file's blocks (`zoo import gguf`), the zoo in float32
  (`--dequantize`) and llama.cpp (node-llama-cpp) on the file itself, the sides
  alternating, the order reversed every round;
- prompt reading: a ``PROMPT_TOKENS``-token prompt (the opening of Tiny Shakespeare)
  read at once, in tokens per CPU second, the same three sides alternating (the
  zoo reads a prompt this long by dequantising each matrix and BLAS);
- the catalogue's size against the file's, the peak RSS of a fresh process that
  loads and decodes 16 tokens, and how far the kernel's logits are from the
  float32 import's over the decoded tokens.

The table goes into docs/benchmarks.md (section "quantized") with the machine's load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.bench_smollm2 import GGUF, PROMPT, llama_cpp, references, timed_cpu
from benchmarks.common import ROOT, load_text, machine_load, spread, spread_text, write_section
from benchmarks.gguf_decoding import fresh_process, greedy_decoder, import_packed_and_float32, interleaved

PACKED, FLOAT = "smollm2-q4-1", "smollm2-f32"
PROMPT_TOKENS = 512  # the prompt-reading figure
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)] * 30 + [(49152, 576)]


def copy_bandwidth() -> float:
    source = torch.empty(64 * 1024 * 1024)  # 256 MiB, far beyond the caches
    target = torch.empty_like(source)
    target.copy_(source)
    return 2 * source.numel() * 4 / min(timed_cpu(lambda: target.copy_(source)) for _ in range(5))


def kernels(threads: int) -> dict:
    """Tokens per CPU second of one token's products alone, per kernel, and the bytes each reads."""
    import gguf
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    from zoo_core.loading.ggml_blocks import dequantize_rows
    from zoo_core.loading.ggml_kernels import matvec

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    weights = [torch.randn(*shape) * 0.02 for shape in SHAPES]
    inputs = {576: torch.randn(1, 576), 1536: torch.randn(1, 1536)}
    Q = gguf.GGMLQuantizationType
    # quantised once per distinct shape (the package's numpy quantiser is slow), copied per layer:
    # every layer's bytes are its own, as in a model, so the caches do not hold them between layers
    blocks = {}
    for kind in (Q.Q4_1, Q.Q4_0, Q.Q8_0):
        first = {w.shape: torch.from_numpy(gguf.quants.quantize(w.numpy(), kind)) for w in weights[:4] + weights[-1:]}
        blocks[kind] = [first[w.shape].clone() for w in weights]
    fbgemm = []
    with warnings.catch_warnings():  # torch.ao's deprecation: the old path, measured as the reference
        warnings.simplefilter("ignore", UserWarning)
        for weight in weights:
            linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
            linear.weight.data = weight
            linear.qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
            fbgemm.append(Int8Linear.from_float(linear))
    int8pack = [(torch.randint(-127, 127, w.shape, dtype=torch.int8), torch.rand(w.shape[0])) for w in weights]
    int4pack = [
        (
            torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.randint(0, 16, w.shape, dtype=torch.int32), 1),
            torch.rand(w.shape[1] // 32, w.shape[0], 2),
        )
        for w in weights
    ]
    values = sum(w.numel() for w in weights)

    def x(n):
        return inputs[n]

    candidates = {
        "float32 F.linear": (lambda: [F.linear(x(w.shape[1]), w) for w in weights], 4.0),
        "torch.ao dynamic int8 (fbgemm, the old --quantize int8)": (lambda: [m(x(m.in_features)) for m in fbgemm], 1.0),
        "aten _weight_int8pack_mm (per-row int8)": (
            lambda: [torch.ops.aten._weight_int8pack_mm(x(w.shape[1]), w, s) for w, s in int8pack],
            1.0,
        ),
        "aten _weight_int4pack_mm_for_cpu (groups of 32)": (
            lambda: [
                torch.ops.aten._weight_int4pack_mm_for_cpu(x(w.shape[1]), p, 32, sz)
                for (p, sz), w in zip(int4pack, weights)
            ],
            0.5 + 8 / 32,
        ),
        "Q4_1 dequantised per call, then F.linear": (
            lambda: [F.linear(x(w.shape[1]), dequantize_rows(b, Q.Q4_1)) for b, w in zip(blocks[Q.Q4_1], weights)],
            20 / 32,
        ),
    }
    for kind, size in ((Q.Q4_1, 20), (Q.Q4_0, 18), (Q.Q8_0, 34)):
        candidates[f"zoo C kernel, {kind.name} blocks"] = (
            lambda kind=kind: [matvec(b, int(kind), x(w.shape[1])) for b, w in zip(blocks[kind], weights)],
            size / 32,
        )
    out = {}
    with torch.inference_mode():
        for name, (run, bytes_per_value) in candidates.items():
            run()
            out[name] = {"tokens_per_s": 1 / min(timed_cpu(run) for _ in range(5)), "bytes": values * bytes_per_value}
    return out


def decoding(rounds: int, tokens: int, threads: int, gguf: Path, packed, full) -> dict:
    torch.set_num_threads(threads)
    ids = torch.tensor([full.tokenizer.encode(PROMPT)])
    texts, gaps = {}, []

    def zoo_side(model, key):
        decode = greedy_decoder(model, ids, tokens)

        def run():
            rate, drawn = decode()
            texts[key] = full.tokenizer.decode(drawn)
            return rate

        return run

    def llama_side():
        result = llama_cpp(gguf, threads, tokens)
        texts["llama.cpp"] = result["text"]
        return result["tokens"] / result["cpu_seconds"]

    sides = {
        "zoo packed Q4_1": zoo_side(packed, "packed"),
        "zoo float32": zoo_side(full, "float"),
        "llama.cpp": llama_side,
    }
    runs = interleaved(sides, rounds)
    ratios = [a / b for a, b in zip(runs["zoo packed Q4_1"], runs["llama.cpp"])]
    # the kernel's logits against the float32 import's, token by token along the packed side's text
    with torch.inference_mode():
        caches = packed.network.make_cache(), full.network.make_cache()
        step = ids
        for _ in range(8):
            a, _ = packed.network(step, cache=caches[0])
            b, _ = full.network(step, cache=caches[1])
            gaps.append(float((a[0, -1] - b[0, -1]).abs().max() / b[0, -1].abs().max()))
            step = torch.tensor([[int(b[0, -1].argmax())]])
    return {
        "tokens_per_cpu_second": {side: spread(values) for side, values in runs.items()},
        "packed_over_llama_cpp": spread(ratios),
        "texts": texts,
        "largest_relative_logit_gap": max(gaps[1:]),  # the first step reads the prompt at once: dequantised, exact
    }


def prompt_reading(rounds: int, threads: int, gguf: Path, packed, full) -> dict:
    """Tokens per CPU second of reading a long prompt at once: the zoo (packed, float32) and llama.cpp."""
    torch.set_num_threads(threads)
    opening = (ROOT / "data" / "tinyshakespeare.txt").read_text()[:4000]
    text = full.tokenizer.decode(full.tokenizer.encode(opening)[:PROMPT_TOKENS])
    ids = torch.tensor([full.tokenizer.encode(text)])

    def zoo_side(model):
        def run():
            with torch.inference_mode():
                seconds = timed_cpu(lambda: model.network(ids, cache=model.network.make_cache()))
            return ids.shape[1] / seconds

        return run

    def llama_side():
        result = llama_cpp(gguf, threads, 1, text)
        return result["prompt_tokens"] / result["prompt_cpu_seconds"]

    sides = {"zoo packed Q4_1": zoo_side(packed), "zoo float32": zoo_side(full), "llama.cpp": llama_side}
    runs = interleaved(sides, rounds)
    return {"tokens": ids.shape[1], "tokens_per_cpu_second": {side: spread(values) for side, values in runs.items()}}


def measure(rounds: int, tokens: int, work: Path) -> dict:
    gguf = references() / GGUF
    if not gguf.exists():
        raise SystemExit(f"{gguf} is missing: `make references` fetches it")
    env = {**os.environ, "ZOO_HOME": str(work / "home"), "ZOO_CACHE": str(work / "cache")}
    import_packed_and_float32(gguf, env, PACKED, FLOAT)
    sizes = {name: (work / "home" / "checkpoints" / f"{name}.safetensors").stat().st_size for name in (PACKED, FLOAT)}
    print("imported; loading and decoding in fresh processes", file=sys.stderr, flush=True)
    memory = {name: [fresh_process(env, name, 1, PROMPT) for _ in range(2)][-1] for name in (PACKED, FLOAT)}
    os.environ.update(ZOO_HOME=env["ZOO_HOME"], ZOO_CACHE=env["ZOO_CACHE"])
    import zoo_core

    packed, full = zoo_core.load(PACKED), zoo_core.load(FLOAT)
    bandwidth = copy_bandwidth()
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "rounds": rounds,
        "tokens": tokens,
        "file_bytes": gguf.stat().st_size,
        "checkpoint_bytes": sizes,
        "fresh_process": memory,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "threads": {},
    }
    for threads in (1, 2):
        print(f"{threads} thread(s): kernels, then decoding", file=sys.stderr, flush=True)
        report["threads"][threads] = {
            "kernels": kernels(threads),
            "decoding": decoding(rounds, tokens, threads, gguf, packed, full),
            "prompt": prompt_reading(rounds, threads, gguf, packed, full),
        }
    report["load_average"] = machine_load()
    return report


def table(report: dict, command: str) -> str:
    bandwidth = report["copy_bandwidth_bytes_per_s"]
    lines = [
        f"`{command}` on {report['date']}: SmolLM2-135M-Instruct's Q4_1 file, {report['rounds']} rounds of "
        f"{report['tokens']} greedy tokens, tokens per CPU second of the computing process (median, range); the "
        f"machine is shared (2 cores, load 1/5/15 min at the end {load_text(report['load_average'])}): the "
        "figures are noisy. Memory copy bandwidth "
        f"{bandwidth / 1e9:.1f} GB/s (read + written, 256 MiB).",
        "",
        f"Catalogue: {report['checkpoint_bytes'][PACKED] / 1e6:.1f} MB packed "
        f"({report['checkpoint_bytes'][PACKED] / report['file_bytes']:.2f}× the {report['file_bytes'] / 1e6:.1f} MB file), "
        f"{report['checkpoint_bytes'][FLOAT] / 1e6:.1f} MB with `--dequantize`. Peak RSS of a fresh process that loads "
        f"(second load: mapped) and decodes 16 tokens: packed "
        f"{report['fresh_process'][PACKED]['decode_peak_rss_bytes'] / 1e6:.0f} MB, float32 "
        f"{report['fresh_process'][FLOAT]['decode_peak_rss_bytes'] / 1e6:.0f} MB.",
        "",
    ]
    for threads, part in report["threads"].items():
        lines += [
            f"**{threads} thread(s): one token's matrix products alone** (random weights, SmolLM2's shapes)",
            "",
            "| kernel | tokens per CPU-second | bytes read per token | roofline (bandwidth ÷ bytes) |",
            "|---|---|---|---|",
        ]
        for name, row in part["kernels"].items():
            lines.append(
                f"| {name} | {row['tokens_per_s']:.1f} | {row['bytes'] / 1e6:.0f} MB | {bandwidth / row['bytes']:.0f} |"
            )
        decode = part["decoding"]
        lines += [
            "",
            f"**{threads} thread(s): greedy decoding**",
            "",
            "| side | tokens per CPU-second |",
            "|---|---|",
        ]
        for side, values in decode["tokens_per_cpu_second"].items():
            lines.append(f"| {side} | {spread_text(values, '.1f')} |")
        lines += [
            "",
            f"Packed ÷ llama.cpp, round by round: {spread_text(decode['packed_over_llama_cpp'], '.2f')}. Largest "
            f"logit gap between the kernel and the float32 import over 7 decoded tokens, relative to the largest "
            f"logit: {decode['largest_relative_logit_gap']:.1e}.",
            "",
            f"**{threads} thread(s): reading a {part['prompt']['tokens']}-token prompt at once**",
            "",
            "| side | tokens per CPU-second |",
            "|---|---|",
        ]
        for side, values in part["prompt"]["tokens_per_cpu_second"].items():
            lines.append(f"| {side} | {spread_text(values, '.1f')} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--work", type=Path, default=None, help="keep the imports here between runs")
    parser.add_argument("--no-write", action="store_true", help="print, do not write docs/benchmarks.md")
    args = parser.parse_args()
    command = f"python -m benchmarks.bench_quantized --rounds {args.rounds} --tokens {args.tokens}"
    with tempfile.TemporaryDirectory() as scratch:
        report = measure(args.rounds, args.tokens, args.work or Path(scratch))
    print(json.dumps(report, indent=1, default=str))
    section = f"<!-- quantized: begin -->\n## GGUF weights kept quantised (SmolLM2-135M Q4_1)\n\n{table(report, command)}\n<!-- quantized: end -->"
    print(section)
    if not args.no_write:
        write_section("quantized", section)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
