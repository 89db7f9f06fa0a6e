"""Measuring a GGUF file's two imports, its blocks kept (`zoo import gguf`) and float32
(`--dequantize`), as benchmarks/bench_quantized.py and benchmarks/real_models.py do:
the imports into a scratch ZOO_HOME, greedy decoding timed in CPU seconds of this
process, and the peak RSS of a fresh process that loads a variant and decodes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import torch


def zoo(env: dict, *args: str) -> subprocess.CompletedProcess:
    """The zoo's CLI in a child process with ``env`` (its scratch ZOO_HOME)."""
    return subprocess.run([sys.executable, "-m", "zoo_core", *args], env=env, capture_output=True, text=True)


def import_packed_and_float32(gguf: Path, env: dict, packed: str, full: str) -> None:
    """`zoo import gguf` the file twice into the ZOO_HOME of ``env``: as ``packed`` (the
    default, the file's blocks) and as ``full`` (float32); a variant already there (a
    --work folder kept from an earlier run) is not imported again."""
    import_once(gguf, env, packed)
    import_once(gguf, env, full, "--dequantize")


def import_once(gguf: Path, env: dict, name: str, *options: str) -> None:
    """`zoo import gguf` the file as ``name`` into the ZOO_HOME of ``env``, unless a
    variant of that name is there already (a --work folder kept from an earlier run)."""
    if zoo(env, "show", name).returncode != 0:
        done = zoo(env, "import", "gguf", str(gguf), "--name", name, *options)
        if done.returncode != 0:
            raise SystemExit(f"importing {gguf} failed: {done.stderr.strip()}")


# Peak RSS from VmHWM, the new program's own: the parent's peak does not carry over.
LOAD_SCRIPT = """
import json, re, time
import torch
torch.set_num_threads({threads})
import zoo_core
from zoo_core.inference.sampling import sample_tokens
model = zoo_core.load({name!r})
ids = torch.tensor([model.tokenizer.encode({prompt!r})])
sample_tokens(model.network, ids, {tokens}, temperature=0)
peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
print(json.dumps({{"decode_peak_rss_bytes": peak, "verified_before": model.verification.verified_before}}))
"""


def fresh_process(env: dict, name: str, threads: int, prompt: str, tokens: int = 16) -> dict:
    """Load ``name`` in a new interpreter, decode ``tokens`` greedy tokens after ``prompt``;
    its peak RSS, and whether an earlier load had verified the file (then it is mapped)."""
    script = LOAD_SCRIPT.format(threads=threads, name=name, prompt=prompt, tokens=tokens)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"loading and decoding {name} in a fresh process failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def greedy_decoder(model, ids: torch.Tensor, tokens: int):
    """A function that decodes ``tokens`` greedy tokens after ``ids`` (the prompt read
    first, not timed) and returns (tokens per CPU second of this process, the ids drawn)."""

    def run() -> tuple[float, list[int]]:
        cache = model.network.make_cache()
        with torch.inference_mode():
            logits, _ = model.network(ids, cache=cache)
            drawn = [int(logits[0, -1].argmax())]
            began = time.process_time()
            for _ in range(tokens):
                logits, _ = model.network(torch.tensor([[drawn[-1]]]), cache=cache)
                drawn.append(int(logits[0, -1].argmax()))
            seconds = time.process_time() - began
        return tokens / seconds, drawn

    return run


def interleaved(sides: dict, rounds: int) -> dict[str, list[float]]:
    """Each side (a function returning a rate) once to warm it (pages the mapped files in,
    builds the kernel), then ``rounds`` rounds of every side, the order reversed every round."""
    for side in sides.values():
        side()
    runs: dict[str, list[float]] = {side: [] for side in sides}
    for round_ in range(rounds):
        for side in list(sides) if round_ % 2 == 0 else list(reversed(sides)):
            runs[side].append(sides[side]())
    return runs
