"""The results table of the real models: results/real-models.csv, one row per real model.

    .venv/bin/python -m benchmarks.real_models [--models smollm2,gemma3] [--tokens 32] [--rounds 3] [--out FILE]

For each real model the zoo holds (the GGUF files `make references` fetches into
.references/ or $ZOO_REFERENCES), in a scratch ZOO_HOME: `zoo import gguf` twice,
packed (the file's blocks, the default) and float32 (`--dequantize`), then

- parameters and sizes: the card's parameter count, the GGUF file's bytes, each
  import's checkpoint bytes in the catalogue;
- bits per byte on a fixed text: each import's `paragraph_bits_per_byte`, the fixed
  English paragraph `zoo import gguf` scores (zoo_core.interop.gguf_import);
- decoding: greedy tokens after a fixed prompt, one thread, in tokens per CPU second
  of this process (the machine is shared), packed and float32 alternating, the order
  reversed every round: median, min and max over the rounds;
- peak memory: the peak RSS (VmHWM) of a fresh process that loads each import (a
  second load: the file verified before, then mapped) and decodes the same tokens.

Each row records the date, the machine, torch's version and the machine's load, as
docs/benchmarks.md records them beside its figures. The gallery shows the table
(`zoo web`, every results/*.csv); docs/benchmarks.md says what it rests on.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch

from benchmarks.bench_smollm2 import PROMPT, references
from benchmarks.common import ROOT, load_text, machine_load, spread
from benchmarks.gguf_decoding import fresh_process, greedy_decoder, import_packed_and_float32, interleaved

THREADS = 1


@dataclass(frozen=True)
class RealModel:
    key: str  # what --models names
    model: str  # the table's first column
    file: str  # under .references/ (tests/references.py names the same files)
    name: str  # the float32 import's variant name, as the model's docs/ page imports it; packed: NAME-packed


REAL_MODELS = (
    RealModel("smollm2", "SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct"),
    RealModel("gemma3", "Gemma-3-270M", "gemma-3-270m-q4_k_m.gguf", "gemma-3-270m"),
)

COLUMNS = [
    "model",
    "file",
    "file_type",
    "parameters",
    "file_mb",
    "catalogue_mb_packed",
    "catalogue_mb_float32",
    "bits_per_byte_packed",
    "bits_per_byte_float32",
    "tokens_per_cpu_second_packed",
    "tokens_per_cpu_second_packed_min",
    "tokens_per_cpu_second_packed_max",
    "tokens_per_cpu_second_float32",
    "tokens_per_cpu_second_float32_min",
    "tokens_per_cpu_second_float32_max",
    "peak_rss_mb_packed",
    "peak_rss_mb_float32",
    "decode_tokens",
    "rounds",
    "threads",
    "measured",
    "machine",
    "torch",
    "load_average",
]


def machine() -> str:
    """The machine as docs/benchmarks.md names it: architecture, cores and the CPU's model."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = ", " + line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores{model}"


def file_type(gguf: Path) -> str:
    """The quantisation the file declares (general.file_type), as llama.cpp names it: 'Q4_K_M'."""
    import gguf as gguf_package

    reader = gguf_package.GGUFReader(gguf)
    field = reader.fields.get("general.file_type")
    if field is None:
        return ""
    return gguf_package.LlamaFileType(int(field.parts[field.data[0]][0])).name.removeprefix("MOSTLY_")


def measure(real: RealModel, tokens: int, rounds: int, work: Path) -> dict:
    """One row of the table: ``real``'s two imports measured in ``work``."""
    gguf = references() / real.file
    if not gguf.exists():
        raise SystemExit(f"{gguf} is missing: `make references` fetches it")
    packed, full = f"{real.name}-packed", real.name
    home, cache = work / real.key / "home", work / real.key / "cache"
    env = {**os.environ, "ZOO_HOME": str(home), "ZOO_CACHE": str(cache)}
    print(f"{real.model}: importing packed and float32", file=sys.stderr, flush=True)
    import_packed_and_float32(gguf, env, packed, full)
    with mock.patch.dict(os.environ, ZOO_HOME=str(home), ZOO_CACHE=str(cache)):  # put back as it was after
        import zoo_core

        models = {name: zoo_core.load(name) for name in (packed, full)}
        variants = {name: zoo_core.get_variant(name) for name in (packed, full)}
        cards = {name: variant.card for name, variant in variants.items()}
        size = {name: variant.checkpoint_path.stat().st_size for name, variant in variants.items()}
        print(f"{real.model}: decoding, {rounds} round(s) of {tokens} tokens", file=sys.stderr, flush=True)
        torch.set_num_threads(THREADS)
        ids = torch.tensor([models[full].tokenizer.encode(PROMPT)])
        decoders = {name: greedy_decoder(model, ids, tokens) for name, model in models.items()}
        runs = interleaved({name: (lambda d=decode: d()[0]) for name, decode in decoders.items()}, rounds)
        del models, decoders
    # the loads above verified both files: a fresh process maps them, as a user's second load does
    memory = {name: fresh_process(env, name, THREADS, PROMPT, tokens) for name in (packed, full)}
    rates = {name: spread(values) for name, values in runs.items()}
    return {
        "model": real.model,
        "file": real.file,
        "file_type": file_type(gguf),
        "parameters": cards[full].parameters,
        "file_mb": f"{gguf.stat().st_size / 1e6:.1f}",
        "catalogue_mb_packed": f"{size[packed] / 1e6:.1f}",
        "catalogue_mb_float32": f"{size[full] / 1e6:.1f}",
        "bits_per_byte_packed": f"{cards[packed].metrics.paragraph_bits_per_byte:.4f}",
        "bits_per_byte_float32": f"{cards[full].metrics.paragraph_bits_per_byte:.4f}",
        "tokens_per_cpu_second_packed": f"{rates[packed]['median']:.1f}",
        "tokens_per_cpu_second_packed_min": f"{rates[packed]['min']:.1f}",
        "tokens_per_cpu_second_packed_max": f"{rates[packed]['max']:.1f}",
        "tokens_per_cpu_second_float32": f"{rates[full]['median']:.1f}",
        "tokens_per_cpu_second_float32_min": f"{rates[full]['min']:.1f}",
        "tokens_per_cpu_second_float32_max": f"{rates[full]['max']:.1f}",
        "peak_rss_mb_packed": f"{memory[packed]['decode_peak_rss_bytes'] / 1e6:.0f}",
        "peak_rss_mb_float32": f"{memory[full]['decode_peak_rss_bytes'] / 1e6:.0f}",
        "decode_tokens": tokens,
        "rounds": rounds,
        "threads": THREADS,
    }


def write_table(rows: list[dict], out: Path) -> None:
    """The CSV, written beside and then renamed over ``out``: an interrupted run leaves the old table."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with partial.open("w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    partial.replace(out)


def markdown_table(rows: list[dict]) -> str:
    """The table's figures as docs/benchmarks.md shows them (the command prints it; a test
    holds the page to the shipped CSV)."""
    lines = [
        "| model | parameters | file | catalogue packed / float32 | bits per byte packed / float32 "
        "| tokens per CPU-second packed | float32 | peak RSS packed / float32 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        rate = {
            side: f"{row[f'tokens_per_cpu_second_{side}']} ({row[f'tokens_per_cpu_second_{side}_min']}–"
            f"{row[f'tokens_per_cpu_second_{side}_max']})"
            for side in ("packed", "float32")
        }
        lines.append(
            f"| {row['model']} ({row['file_type']}) | {int(row['parameters']):,} | {row['file_mb']} MB "
            f"| {row['catalogue_mb_packed']} / {row['catalogue_mb_float32']} MB "
            f"| {row['bits_per_byte_packed']} / {row['bits_per_byte_float32']} | {rate['packed']} | {rate['float32']} "
            f"| {row['peak_rss_mb_packed']} / {row['peak_rss_mb_float32']} MB |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    keys = [real.key for real in REAL_MODELS]
    parser.add_argument(
        "--models", default=",".join(keys), help=f"comma-separated, of {', '.join(keys)} (default: all)"
    )
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens decoded per round (default 32)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per model (default 3)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "real-models.csv")
    parser.add_argument("--work", type=Path, default=None, help="keep the imports here between runs")
    args = parser.parse_args(argv)
    chosen = [key.strip() for key in args.models.split(",") if key.strip()]
    unknown = [key for key in chosen if key not in keys]
    if unknown or not chosen:
        parser.error(f"--models: {', '.join(unknown) or 'none given'}; the real models are {', '.join(keys)}")
    if args.tokens < 1 or args.rounds < 1:
        parser.error("--tokens and --rounds must be at least 1")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for real in REAL_MODELS:
            if real.key in chosen:
                rows.append(measure(real, args.tokens, args.rounds, args.work or Path(scratch)))
    measured = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    context = {
        "measured": measured,
        "machine": machine(),
        "torch": torch.__version__,
        "load_average": load_text(machine_load()),
    }
    rows = [{**row, **context} for row in rows]
    write_table(rows, args.out)
    print(markdown_table(rows))
    print(f"wrote {args.out} ({len(rows)} row(s), load 1/5/15 min {context['load_average']})", file=sys.stderr)


if __name__ == "__main__":
    main()
