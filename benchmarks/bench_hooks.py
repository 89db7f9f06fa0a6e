"""Hook points cost nothing while no hook is set: decoding against the code before them.

    .venv/bin/python -m benchmarks.bench_hooks [--commit ef74ac5] [--seconds 40] [--write]

The built-in plugins of ``--commit`` (the commit before hook points existed) are
unpacked with ``git archive`` and imported as a package of their own beside this
checkout's, so both sides run in one process on the same machine moment: the
same variant's network is built from each side's classes, with the same
weights, and samples with its KV cache from one token. The two sides must draw
the same tokens (checked). The sides run one sample each in turn, the order
reversed at every turn (`common.paired_step_seconds`), for ``--seconds`` per
variant, and the ratio is taken turn by turn: on this shared machine its speed
changes within seconds. A third side, this checkout with one reading
hook set, shows what a set hook costs (every path passes the hook points).
A whole-window forward (the prompt's pass, where every hook point is passed)
is timed the same way.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

import torch

from benchmarks.common import (
    ROOT,
    load_text,
    machine_load,
    median_interval,
    paired_step_seconds,
    spread,
    spread_text,
    write_section,
    zoo_network,
)
from zoo_core.inference.sampling import sample_tokens
from zoo_core.plugin_api import hooks

BEFORE = "ef74ac5"  # main just before hook points (issue 33)
VARIANTS = {"gpt-char-mini": 63, "transformer-6b-sin": 31}  # new tokens: inside each window


def _import_plugins(commit: str, folder: Path):
    """``commit``'s plugins/ as the package ``zoo_plugins_before``."""
    archive = subprocess.run(["git", "archive", commit, "plugins"], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    spec = importlib.util.spec_from_file_location(
        "zoo_plugins_before", folder / "plugins" / "__init__.py", submodule_search_locations=[str(folder / "plugins")]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules["zoo_plugins_before"] = package
    spec.loader.exec_module(package)
    return package


class _Registered:
    """The slice of a component registry the transformer asks for: ``create(name, **settings)``."""

    def __init__(self, classes: dict):
        self.classes = classes

    def create(self, name: str, **settings):
        return self.classes[name](**settings)


def _network_before(config: dict, now: torch.nn.Module):
    """The same network built from the earlier commit's classes, with ``now``'s weights."""
    import importlib

    blocks = importlib.import_module("zoo_plugins_before.blocks.blocks")
    encodings = importlib.import_module("zoo_plugins_before.positions.encodings")
    rope = importlib.import_module("zoo_plugins_before.positions.rope")
    gpt = importlib.import_module("zoo_plugins_before.gpt.model")
    transformer = importlib.import_module("zoo_plugins_before.models.transformer")
    components = {
        "blocks": _Registered({"pre-norm": blocks.PreNormBlock, "post-norm": blocks.PostNormBlock}),
        "positions": _Registered(
            {
                "learned": encodings.LearnedPositions,
                "sinusoidal": encodings.SinusoidalPositions,
                "none": encodings.NoPositions,
                "rope": rope.RotaryPositions,
            }
        ),
    }
    kind = gpt.GPTLanguageModel if type(now).__name__ == "GPTLanguageModel" else transformer.TransformerLanguageModel
    settings = {**gpt.GPT_DEFAULTS, **config} if kind is gpt.GPTLanguageModel else dict(config)
    before = kind(components=components, **settings)
    before.load_state_dict(now.state_dict())
    return before.eval()


def _sampler(model, new_tokens: int, tokens: dict, side: str):
    start = torch.zeros(1, 1, dtype=torch.long)

    def run():
        with torch.inference_mode():
            tokens[side] = sample_tokens(model, start, new_tokens, generator=torch.Generator().manual_seed(1))

    return run


def _forward(model, window: int):
    ids = torch.randint(0, 60, (1, window), generator=torch.Generator().manual_seed(2))

    def run():
        with torch.inference_mode():
            model(ids)

    return run


def _reading_hook(activation, name):
    return None


def measure(commit: str, seconds: float, threads: int = 1) -> dict:
    torch.set_num_threads(threads)
    results = []
    load_before = machine_load()
    with tempfile.TemporaryDirectory() as scratch:
        _import_plugins(commit, Path(scratch))
        for variant, new_tokens in VARIANTS.items():
            now, config = zoo_network(variant)
            now.eval()
            before = _network_before(config, now)
            tokens: dict = {}
            hooked_tokens: dict = {}

            def hooked_run(run=_sampler(now, new_tokens, hooked_tokens, "hooked")):
                with hooks(now, {"blocks.0.resid_post": _reading_hook}):
                    run()

            decoding = paired_step_seconds(
                {
                    "now": _sampler(now, new_tokens, tokens, "now"),
                    "before": _sampler(before, new_tokens, tokens, "before"),
                    "hooked": hooked_run,
                },
                warmup=2,
                seconds=seconds,
            )
            window = config["context_length"]
            forward = paired_step_seconds(
                {"now": _forward(now, window), "before": _forward(before, window)}, warmup=5, seconds=seconds / 2
            )
            results.append(
                {
                    "variant": variant,
                    "new_tokens": new_tokens,
                    "window": window,
                    "same_tokens": torch.equal(tokens["now"], tokens["before"])
                    and torch.equal(tokens["now"], hooked_tokens["hooked"]),
                    "tokens_per_second": {
                        side: spread([new_tokens / t for t in times]) for side, times in decoding.items()
                    },
                    "decoding_ratio": median_interval([n / b for n, b in zip(decoding["now"], decoding["before"])]),
                    "decoding_ratio_spread": spread([n / b for n, b in zip(decoding["now"], decoding["before"])]),
                    "hooked_ratio": median_interval([h / b for h, b in zip(decoding["hooked"], decoding["before"])]),
                    "forward_ms": {side: spread([1000 * t for t in times]) for side, times in forward.items()},
                    "forward_ratio": median_interval([n / b for n, b in zip(forward["now"], forward["before"])]),
                    "forward_ratio_spread": spread([n / b for n, b in zip(forward["now"], forward["before"])]),
                }
            )
    return {"commit": commit, "seconds": seconds, "threads": threads, "results": results,
            "load": (load_before, machine_load())}


def section(report: dict) -> str:
    commit = report["commit"]
    lines = [
        "<!-- bench_hooks: begin -->",
        f"## Hook points with no hook set: KV-cache decoding against commit {commit}",
        "",
        f"`.venv/bin/python -m benchmarks.bench_hooks --commit {commit} --seconds {report['seconds']:g}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {report['threads']} thread, random weights; "
        f"machine load before {load_text(report['load'][0])}, after {load_text(report['load'][1])} "
        "(a shared machine: other workers were running). Both sides in one process, the same weights, "
        f"one sample (or forward) per side in turn, the order reversed every turn; {commit} is the commit before "
        "hook points. Ratios are taken turn by turn (this checkout / the commit; 1 is unchanged), as median "
        "[95% interval of the median] (min–max); the speeds are median (min–max).",
        "",
        "| variant | work | this checkout | " + commit + " | ratio | one hook set / " + commit + " |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        ratio, ratio_spread, hooked = r["decoding_ratio"], r["decoding_ratio_spread"], r["hooked_ratio"]
        same = "" if r["same_tokens"] else " (TOKENS DIFFER)"
        lines.append(
            f"| {r['variant']} | {r['new_tokens']} cached tokens, tokens/s{same} "
            f"| {spread_text(r['tokens_per_second']['now'])} | {spread_text(r['tokens_per_second']['before'])} "
            f"| **{ratio['median']:.3f}** [{ratio['low']:.3f}–{ratio['high']:.3f}] "
            f"({ratio_spread['min']:.3f}–{ratio_spread['max']:.3f}) "
            f"| {hooked['median']:.2f} [{hooked['low']:.2f}–{hooked['high']:.2f}] |"
        )
        ratio, ratio_spread = r["forward_ratio"], r["forward_ratio_spread"]
        lines.append(
            f"| {r['variant']} | forward of a {r['window']}-token window, ms "
            f"| {spread_text(r['forward_ms']['now'], '.2f')} | {spread_text(r['forward_ms']['before'], '.2f')} "
            f"| **{ratio['median']:.3f}** [{ratio['low']:.3f}–{ratio['high']:.3f}] "
            f"({ratio_spread['min']:.3f}–{ratio_spread['max']:.3f}) | |"
        )
    lines += [
        "",
        "Decoding runs the blocks' own forward, hook or none; with no hook set a hook point is one "
        "attribute check where a forward passes it. The last column is decoding with one reading hook set "
        "(on `blocks.0.resid_post`). "
        "The forward rows price the identity calls themselves (nine per block, three more outside) on the "
        "smallest models, where Python's cost per call, not arithmetic, sets the time.",
        "<!-- bench_hooks: end -->",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default=BEFORE, help="the commit before hook points")
    parser.add_argument("--seconds", type=float, default=40, help="timing per variant, split among the sides")
    parser.add_argument("--write", action="store_true", help="put the result into docs/benchmarks.md")
    args = parser.parse_args()
    text = section(measure(args.commit, args.seconds))
    print(text)
    if args.write:
        write_section("bench_hooks", text)


if __name__ == "__main__":
    main()
