"""Quality per quantisation type, stated as llama.cpp states it (issue 54).

    ZOO_REFERENCES=/path/to/references .venv/bin/python -m benchmarks.bench_quant_quality [--windows 3] [--length 512]

SmolLM2-135M-Instruct's shipped Q4_1 file (`make references`) is imported twice:
float32 (`zoo import gguf --dequantize`), the reference model, and as its own blocks.
The reference is quantised by `zoo quantize` to each type the zoo can keep
(`zoo_core.interop.gguf_quantize.TARGETS`); the K types are tried too, and their
refusal is reported. The fixed text: the opening of Tiny Shakespeare's validation
split (the last tenth of data/tinyshakespeare.txt), cut into ``--windows`` windows
of ``--length`` tokens, each the tokenizer's BOS and the next ``length - 1`` tokens
of the text, read from an empty cache; every token after the BOS is predicted from
all the window's tokens before it. Per type:

- the catalogue's checkpoint size;
- the zoo's perplexity (exp of the mean negative log-likelihood) and mean KL
  divergence of its next-token distributions from the reference's, two ways: the
  window read at once (each weight dequantised to float32 then BLAS: the file's
  error alone) and read ``MAX_TOKENS`` tokens at a time through the KV cache, which
  is how decoding runs (the packed C kernel: whatever activation rounding it does);
  and the KL between those two, which is what the zoo adds to the weights' error;
- llama.cpp's perplexity on the same token ids and the same weights: each variant
  written back to GGUF with gguf's writer (the shipped file's metadata and
  tokenizer, each matrix quantised by the same `gguf.quants.quantize` from the same
  float32 values as `zoo quantize` does) and read by node-llama-cpp
  (benchmarks/llama_cpp_logprobs.mjs), and how often its most likely next token is
  the zoo's (decoding path).

Everything runs on ``--threads`` threads (default 1); the machine's load is taken
before and after. The table goes into docs/benchmarks.md (section "quant_quality").
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.bench_smollm2 import GGUF, references
from benchmarks.common import ROOT, load_text, machine_load, write_section
from benchmarks.gguf_decoding import import_packed_and_float32, zoo

REFERENCE, SHIPPED = "smollm2-f32", "smollm2-q4-1-file"
K_TYPES = ("q4_k", "q5_k", "q6_k")
NODE_SCRIPT = ROOT / "benchmarks" / "llama_cpp_logprobs.mjs"
Q = gguf.GGMLQuantizationType


# --- the pieces (tests/test_bench_quant_quality.py checks them) ---------------------


def text_windows(tokenizer, bos_id: int | None, text: str, windows: int, length: int) -> list[list[int]]:
    """``windows`` windows of ``length`` ids: BOS (where the tokenizer has one) and
    the text's next tokens, the windows following each other through the text."""
    ids = tokenizer.encode(text)
    head = [] if bos_id is None else [bos_id]
    body = length - len(head)
    if len(ids) < windows * body:
        raise SystemExit(f"the text gives {len(ids)} tokens, fewer than {windows} windows of {body}")
    return [head + ids[i * body : (i + 1) * body] for i in range(windows)]


@torch.inference_mode()
def log_probs_at_once(network, window: list[int]) -> torch.Tensor:
    """[len - 1, vocab] log-probabilities of each next token, the window read in one pass."""
    logits, _ = network(torch.tensor([window[:-1]]))
    return F.log_softmax(logits[0].float(), dim=-1)


@torch.inference_mode()
def log_probs_stepped(network, window: list[int], step: int) -> torch.Tensor:
    """The same, the window read ``step`` tokens at a time through the KV cache, as
    decoding reads it (a packed layer sends so few rows to its C kernel)."""
    cache = network.make_cache()
    inputs = window[:-1]
    parts = []
    for start in range(0, len(inputs), step):
        logits, _ = network(torch.tensor([inputs[start : start + step]]), cache=cache)
        parts.append(F.log_softmax(logits[0].float(), dim=-1))
    return torch.cat(parts)


def negative_log_likelihoods(log_probs: torch.Tensor, window: list[int]) -> torch.Tensor:
    """Nats of each next token of ``window`` under ``log_probs`` (from one of the above)."""
    targets = torch.tensor(window[1:])
    return -log_probs.double().gather(-1, targets[:, None])[:, 0]


def perplexity(nlls) -> float:
    """exp of the mean negative log-likelihood, as llama.cpp's perplexity states it."""
    values = torch.as_tensor(nlls, dtype=torch.float64)
    return math.exp(float(values.mean()))


def kl_divergences(reference: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """KL(reference ‖ other) of each position's next-token distribution, in nats."""
    reference, other = reference.double(), other.double()
    return (reference.exp() * (reference - other)).sum(dim=-1)


# --- GGUF files for llama.cpp ----------------------------------------------------------


def write_gguf_as(source: Path, target: Path, kind: Q) -> None:
    """``source`` (a GGUF file) rewritten with every matrix whose rows are whole 32-value
    blocks quantised to ``kind`` (F32: dequantised) from its float32 values, as `zoo
    quantize` quantises the float32 import's (blocks run along rows, so llama.cpp's
    row order of Q and K changes no block); vectors stay F32, metadata and tokenizer
    are the source's."""
    reader = gguf.GGUFReader(source)
    architecture = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(target, architecture)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        kinds = field.types
        sub_type = kinds[-1] if kinds[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), kinds[0], sub_type=sub_type)
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        if values.ndim == 2 and kind != Q.F32 and values.shape[1] % 32 == 0:
            writer.add_tensor(tensor.name, gguf.quants.quantize(values, kind), raw_dtype=kind)
        else:
            writer.add_tensor(tensor.name, np.ascontiguousarray(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def llama_cpp_log_probs(model: Path, windows: list[list[int]], threads: int, scratch: Path) -> dict:
    """llama.cpp's log-probability of each next token of each window, and its most likely token."""
    ids = scratch / "windows.json"
    ids.write_text(json.dumps(windows))
    modules = references() / "node-llama-cpp" / "node_modules"
    done = subprocess.run(
        ["node", str(NODE_SCRIPT), str(model), str(threads), str(ids)],
        env={**os.environ, "NODE_PATH": str(modules)},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"llama.cpp on {model.name} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the run ---------------------------------------------------------------------------


def variant_name(to: str) -> str:
    return f"smollm2-{to.replace('_', '-')}"


def k_type_refusals(env: dict) -> dict[str, str]:
    """What `zoo quantize --to` a K type answers, and what gguf's own quantiser does."""
    out = {}
    for to in K_TYPES:
        done = zoo(env, "quantize", REFERENCE, "--to", to, "--name", variant_name(to))
        try:
            gguf.quants.quantize(np.zeros((1, 256), dtype=np.float32), Q[to.upper()])
            package = "quantises it"
        except NotImplementedError:
            package = f"gguf {gguf_version()}'s gguf.quants.quantize raises NotImplementedError"
        refusal = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "(nothing on stderr)"
        out[to] = f"`zoo quantize --to {to}` exits {done.returncode}: {refusal} ({package})"
    return out


def gguf_version() -> str:
    from importlib.metadata import version

    return version("gguf")


def measure(windows_count: int, length: int, threads: int, work: Path) -> dict:
    from zoo_core.interop.gguf_quantize import TARGETS
    from zoo_core.loading.ggml_kernels import MAX_TOKENS

    began, load_before = time.perf_counter(), machine_load()
    source = references() / GGUF
    if not source.exists():
        raise SystemExit(f"{source} is missing: `make references` fetches it")
    env = {**os.environ, "ZOO_HOME": str(work / "home"), "ZOO_CACHE": str(work / "cache")}
    import_packed_and_float32(source, env, SHIPPED, REFERENCE)
    rows = {SHIPPED: {"type": "Q4_1 (shipped file)", "gguf": source}}
    for to in TARGETS:
        name = variant_name(to)
        if zoo(env, "show", name).returncode != 0:
            print(f"zoo quantize {REFERENCE} --to {to}", file=sys.stderr, flush=True)
            done = zoo(env, "quantize", REFERENCE, "--to", to, "--name", name)
            if done.returncode != 0:
                raise SystemExit(f"zoo quantize --to {to} failed: {done.stderr.strip()}")
        rows[name] = {"type": to.upper(), "gguf": work / f"{name}.gguf", "kind": TARGETS[to]}
    refusals = k_type_refusals(env)
    rows = {REFERENCE: {"type": "F32 (reference)", "gguf": work / f"{REFERENCE}.gguf", "kind": Q.F32}, **rows}
    for name, row in rows.items():
        row["checkpoint_bytes"] = (work / "home" / "checkpoints" / f"{name}.safetensors").stat().st_size
        if not row["gguf"].exists():
            print(f"writing {row['gguf'].name}", file=sys.stderr, flush=True)
            partial = row["gguf"].with_suffix(".partial")
            write_gguf_as(source, partial, row["kind"])
            partial.replace(row["gguf"])
        row["gguf_bytes"] = row["gguf"].stat().st_size

    os.environ.update(ZOO_HOME=env["ZOO_HOME"], ZOO_CACHE=env["ZOO_CACHE"])
    import zoo_core

    torch.set_num_threads(threads)
    models = {name: zoo_core.load(name) for name in rows}
    reference = models[REFERENCE]
    text = (ROOT / "data" / "tinyshakespeare.txt").read_text()
    text = text[int(len(text) * 0.9) :][: windows_count * length * 8]  # far more characters than tokens needed
    windows = text_windows(reference.tokenizer, reference.card.tokenizer.bos_id, text, windows_count, length)
    found = {name: {"nll_once": [], "nll_stepped": [], "kl_once": [], "kl_stepped": [], "kl_added": [], "top": []}
             for name in rows}
    zoo_cpu = time.process_time()
    for index, window in enumerate(windows):
        print(f"window {index + 1}/{len(windows)}: the zoo", file=sys.stderr, flush=True)
        expected = log_probs_at_once(reference.network, window)
        for name, model in models.items():
            once = log_probs_at_once(model.network, window)
            stepped = log_probs_stepped(model.network, window, MAX_TOKENS)
            into = found[name]
            into["nll_once"].append(negative_log_likelihoods(once, window))
            into["nll_stepped"].append(negative_log_likelihoods(stepped, window))
            into["kl_once"].append(kl_divergences(expected, once))
            into["kl_stepped"].append(kl_divergences(expected, stepped))
            into["kl_added"].append(kl_divergences(once, stepped))
            into["top"].append(stepped.argmax(-1))
    zoo_cpu = time.process_time() - zoo_cpu
    report_rows = {}
    for name, row in rows.items():
        print(f"llama.cpp on {row['gguf'].name}", file=sys.stderr, flush=True)
        llama = llama_cpp_log_probs(row["gguf"], windows, threads, work)
        into = {key: torch.cat(values) for key, values in found[name].items()}
        llama_nll = -torch.tensor([v for w in llama["log_probs"] for v in w], dtype=torch.float64)
        llama_top = torch.tensor([v for w in llama["top"] for v in w])
        report_rows[name] = {
            "type": row["type"],
            "checkpoint_bytes": row["checkpoint_bytes"],
            "gguf_bytes": row["gguf_bytes"],
            "perplexity_at_once": perplexity(into["nll_once"]),
            "perplexity_stepped": perplexity(into["nll_stepped"]),
            "kl_at_once": float(into["kl_once"].mean()),
            "kl_stepped": float(into["kl_stepped"].mean()),
            "kl_stepped_99th": float(into["kl_stepped"].quantile(0.99)),
            "kl_added": float(into["kl_added"].mean()),
            "kl_added_max": float(into["kl_added"].max()),
            "llama_cpp_perplexity": perplexity(llama_nll),
            "llama_cpp_same_top_token": float((llama_top == into["top"]).double().mean()),
        }
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "file": GGUF,
        "windows": windows_count,
        "length": length,
        "scored_tokens": sum(len(w) - 1 for w in windows),
        "step": MAX_TOKENS,
        "threads": threads,
        "zoo_cpu_seconds": zoo_cpu,
        "wall_seconds": time.perf_counter() - began,
        "load_before": load_before,
        "load_after": machine_load(),
        "kernel_commit": kernel_commit(),
        "rows": report_rows,
        "k_types": refusals,
    }


def kernel_commit() -> str:
    """The last commit that changed the packed kernel's C file: which kernel was measured."""
    done = subprocess.run(
        ["git", "log", "-1", "--format=%h %cs", "--", "zoo_core/loading/kernels/ggml_matvec.c"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or "unknown"


def table(report: dict, command: str) -> str:
    lines = [
        f"`{command}` on {report['date']}: {report['file']}'s float32 dequantisation is the reference; "
        f"{report['scored_tokens']:,} tokens scored ({report['windows']} windows of {report['length']} tokens, each "
        "BOS then the next tokens of Tiny Shakespeare's validation split, every token after BOS predicted from all "
        f"before it in its window), {report['threads']} thread(s). The machine is shared (2 cores, load 1/5/15 min "
        f"{load_text(report['load_before'])} before, {load_text(report['load_after'])} after; "
        f"{report['wall_seconds'] / 60:.1f} min in all): sizes and quality do not depend on it, only the run time does. "
        f"Packed kernel: the C file as of {report['kernel_commit']}.",
        "",
        "Perplexity is exp(mean negative log-likelihood); KL is the mean KL(reference ‖ variant) of the next-token "
        "distributions in nats. *At once*: each window read in one pass (the weights dequantised to float32, BLAS: "
        f"the file's error alone). *Decoding*: read {report['step']} tokens at a time through the KV cache, the "
        "packed kernel's path. *Zoo adds*: KL(at once ‖ decoding) of the same variant, the error the zoo's "
        "arithmetic adds to the weights'. llama.cpp: the same weights as a GGUF file, node-llama-cpp's "
        "probabilities; *same top*: how often its most likely next token is the zoo's (decoding).",
        "",
        "| type | catalogue | GGUF | perplexity at once | decoding | llama.cpp | KL at once | KL decoding (99th pct) "
        "| zoo adds (max) | same top |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"].values():
        lines.append(
            f"| {row['type']} | {row['checkpoint_bytes'] / 1e6:.1f} MB | {row['gguf_bytes'] / 1e6:.1f} MB "
            f"| {row['perplexity_at_once']:.3f} | {row['perplexity_stepped']:.3f} | {row['llama_cpp_perplexity']:.3f} "
            f"| {row['kl_at_once']:.5f} | {row['kl_stepped']:.5f} ({row['kl_stepped_99th']:.4f}) "
            f"| {row['kl_added']:.1e} ({row['kl_added_max']:.1e}) | {row['llama_cpp_same_top_token']:.1%} |"
        )
    lines += ["", "K types, not made:", ""]
    lines += [f"- {to.upper()}: {why}" for to, why in report["k_types"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--length", type=int, default=512, help="tokens per window, BOS included")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None, help="keep the imports and GGUF files here between runs")
    parser.add_argument("--no-write", action="store_true", help="print, do not write docs/benchmarks.md")
    args = parser.parse_args()
    command = (
        f"python -m benchmarks.bench_quant_quality --windows {args.windows} --length {args.length} "
        f"--threads {args.threads}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        report = measure(args.windows, args.length, args.threads, args.work or Path(scratch))
    print(json.dumps(report, indent=1, default=str))
    section = (
        "<!-- quant_quality: begin -->\n## Quality per quantisation type against llama.cpp (SmolLM2-135M)\n\n"
        f"{table(report, command)}\n<!-- quant_quality: end -->"
    )
    print(section)
    if not args.no_write:
        write_section("quant_quality", section)


if __name__ == "__main__":
    main()
