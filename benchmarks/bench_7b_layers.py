"""A 7B model's layers, a few of them: memory and speed per layer, extrapolated to 32 layers.

Writes, with llama.cpp's own `gguf.GGUFWriter`, a llama-architecture GGUF with
Llama-2-7B's widths (hidden 4096, FFN 11008, 32 heads, vocabulary 32000: the
first 32000 tokens of llama.cpp's phi-3 vocabulary file, which are Llama-2's
SentencePiece vocabulary) but only ``--layers`` layers, random weights in
``--type`` blocks (Q4_0, Q8_0 or Q4_K; random bytes with small finite scales,
so nothing is quantised: the decode costs the same whatever the values), into
a temporary folder, never the repository. It imports the file with `zoo import
gguf` (packed) into a temporary ZOO_HOME and measures, for 1 and for 2 layers'
files alike so that the difference is one layer: catalogue bytes, peak
resident memory of a `zoo sample` of a few tokens (fresh process,
tests/peak_memory.py) the first time (it reads and hashes the whole file) and
the second (the file verified before: mapped), and CPU seconds per decoded
token at 1 and 2 threads.

    OMP_NUM_THREADS=1 python -m benchmarks.bench_7b_layers [--type Q4_0] [--tokens 8]

Prints a table; the extrapolation to 32 layers is written by hand in
docs/benchmarks.md ("A 7B model's layers").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType
# Llama-2-7B's widths (its config.json: hidden_size, intermediate_size, num_attention_heads, vocab_size).
HIDDEN, FFN, HEADS, VOCAB = 4096, 11008, 32, 32000
# Byte offsets of each block's float16 scales (ggml's block_q4_0, block_q8_0, block_q4_K).
SCALES = {Q.Q4_0: (0,), Q.Q8_0: (0,), Q.Q4_K: (0, 2), Q.Q4_1: (0, 2)}
ROOT = Path(__file__).resolve().parent.parent
PHI3_VOCAB = ROOT / ".references" / "llama.cpp-vocab" / "ggml-vocab-phi-3.gguf"


def random_blocks(rows: int, values: int, kind, rng: np.random.Generator) -> np.ndarray:
    """``rows`` rows of ``values`` weights as random ``kind`` blocks, every scale 1e-3."""
    block, size = gguf.GGML_QUANT_SIZES[kind]
    blocks = rng.integers(0, 256, (rows * values // block, size), dtype=np.uint8)
    for offset in SCALES[kind]:
        blocks[:, offset : offset + 2] = np.frombuffer(np.float16(1e-3).tobytes(), np.uint8)
    return blocks.reshape(rows, -1)


def write_layers_gguf(path: Path, layers: int, kind, tokens: list[str], tokenizer: dict, *,
                      hidden: int = HIDDEN, ffn: int = FFN, heads: int = HEADS, seed: int = 0) -> None:
    """A llama GGUF at these widths with ``layers`` layers of random ``kind`` blocks.
    ``tokenizer``: the tokenizer metadata besides the token list ({"model": "gpt2",
    "merges": [...]} or {"model": "llama", "scores": [...], "types": [...]})."""
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"Synthetic 7B widths {layers} layers")
    writer.add_license("apache-2.0")
    writer.add_block_count(layers)
    writer.add_context_length(4096)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_tokenizer_model(tokenizer["model"])
    if tokenizer["model"] == "gpt2":
        writer.add_tokenizer_pre("gpt-2")
        writer.add_token_merges(tokenizer["merges"])
    else:
        writer.add_token_scores(tokenizer["scores"])
    writer.add_token_list(tokens)
    writer.add_token_types(tokenizer["types"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    vocab = len(tokens)
    writer.add_tensor("token_embd.weight", random_blocks(vocab, hidden, kind, rng), raw_dtype=kind)
    for layer in range(layers):
        for name, (rows, width) in {
            "attn_q": (hidden, hidden), "attn_k": (hidden, hidden), "attn_v": (hidden, hidden),
            "attn_output": (hidden, hidden), "ffn_gate": (ffn, hidden), "ffn_up": (ffn, hidden),
            "ffn_down": (hidden, ffn),
        }.items():
            writer.add_tensor(f"blk.{layer}.{name}.weight", random_blocks(rows, width, kind, rng), raw_dtype=kind)
        for norm in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{layer}.{norm}.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("output.weight", random_blocks(vocab, hidden, kind, rng), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def llama2_vocabulary() -> tuple[list[str], dict]:
    """Llama-2's 32000 SentencePiece tokens, as llama.cpp's phi-3 vocabulary file holds them first."""
    if not PHI3_VOCAB.is_file():
        sys.exit(f"{PHI3_VOCAB} is missing: run `make references`")
    reader = gguf.GGUFReader(str(PHI3_VOCAB))
    field = reader.fields
    tokens = [str(bytes(field["tokenizer.ggml.tokens"].parts[i]), "utf-8")
              for i in field["tokenizer.ggml.tokens"].data[:VOCAB]]
    scores = [float(field["tokenizer.ggml.scores"].parts[i][0]) for i in field["tokenizer.ggml.scores"].data[:VOCAB]]
    types = [int(field["tokenizer.ggml.token_type"].parts[i][0])
             for i in field["tokenizer.ggml.token_type"].data[:VOCAB]]
    return tokens, {"model": "llama", "scores": scores, "types": types}


def zoo(home: Path, *arguments: str, threads: int = 1, peak: bool = False) -> subprocess.CompletedProcess:
    environment = {**os.environ, "ZOO_HOME": str(home), "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "tests.peak_memory", *arguments] if peak else [
        sys.executable, "-m", "zoo_core.cli", *arguments]
    return subprocess.run(command, env=environment, capture_output=True, text=True, check=True, cwd=ROOT)


DECODE = """
import sys, time, torch
from zoo_core.loading.api import load
network = load(sys.argv[1]).network
tokens = int(sys.argv[2])
with torch.inference_mode():
    cache = network.make_cache()
    network(torch.tensor([[1, 450, 3489]]), cache=cache)
    started = time.process_time()
    for i in range(tokens):  # the decode's work whatever token comes: random weights may draw an end
        network(torch.tensor([[100 + i]]), cache=cache)
    print((time.process_time() - started) / tokens)
"""


def decode_seconds(home: Path, name: str, tokens: int, threads: int) -> float:
    """CPU seconds per token of cached one-token forwards (the packed kernels), in a fresh process."""
    environment = {**os.environ, "ZOO_HOME": str(home), "OMP_NUM_THREADS": str(threads)}
    result = subprocess.run([sys.executable, "-c", DECODE, name, str(tokens)], env=environment, cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def sample_peak(home: Path, name: str) -> tuple[int, int]:
    """(MiB at the start, peak MiB) of a fresh `zoo sample` of 4 tokens."""
    result = zoo(home, "sample", name, "--prompt", "The library", "--max-new-tokens", "4", "--seed", "1", peak=True)
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    return measured["start_mib"], measured["peak_mib"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--type", default="Q4_0", choices=["Q4_0", "Q8_0", "Q4_K"])
    parser.add_argument("--tokens", type=int, default=8, help="tokens decoded per sample (default: %(default)s)")
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2], help="files' layer counts")
    args = parser.parse_args()
    kind = Q[args.type]
    tokens, tokenizer = llama2_vocabulary()
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoo-7b-") as scratch:
        home = Path(scratch) / "home"
        for layers in args.layers:
            source = Path(scratch) / f"synthetic-{layers}.gguf"
            write_layers_gguf(source, layers, kind, tokens, tokenizer)
            name = f"synthetic-7b-{layers}"
            started = time.perf_counter()
            imported = zoo(home, "import", "gguf", str(source), "--name", name, peak=True)
            import_peak = json.loads(imported.stdout.strip().splitlines()[-1])["peak_mib"]
            import_seconds = time.perf_counter() - started
            catalogue = (home / "checkpoints" / f"{name}.safetensors").stat().st_size
            row = {"layers": layers, "file": source.stat().st_size, "catalogue": catalogue,
                   "import_peak": import_peak, "import_seconds": import_seconds}
            source.unlink()
            _, row["first_peak"] = sample_peak(home, name)  # verifies: reads and hashes the whole file
            row["start"], row["peak"] = sample_peak(home, name)  # maps the verified file
            for threads in (1, 2):
                row[f"seconds_per_token_{threads}"] = decode_seconds(home, name, args.tokens, threads)
            rows.append(row)
            print(json.dumps(row), flush=True)
    load_after = os.getloadavg()
    print(f"machine load before {load_before[0]:.1f}/{load_before[1]:.1f}/{load_before[2]:.1f}, "
          f"after {load_after[0]:.1f}/{load_after[1]:.1f}/{load_after[2]:.1f}")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        span = b["layers"] - a["layers"]
        per_layer = {key: (b[key] - a[key]) / span for key in a if key != "layers"}
        print("per layer:", json.dumps({k: round(v, 4) for k, v in per_layer.items()}))
        fixed = {key: a[key] - a["layers"] * per_layer[key] for key in per_layer}
        print("32 layers:", json.dumps({k: round(fixed[k] + 32 * per_layer[k], 3) for k in per_layer}))


if __name__ == "__main__":
    main()
