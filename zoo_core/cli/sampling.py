"""Drawing text from a variant: sample."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ..errors import ZooError
from ..inference.prompts import read_prompt
from ..inference.settings import OPTION_NAMES  # no torch
from ..plugin_api.protocols import TaskModel, implements
from .options import device_options, load_on_threads, sampling_settings

# Options of `zoo sample` that only language models use: these, and a flag per
# sampling setting (named by SamplingSettings). Task models (the puzzle) answer
# the prompt instead and say which of them were given and ignored.
_DISPLAY_OPTIONS = ("greedy", "stream")


def _unescape(text: str) -> str:
    r"""``\n`` and ``\t`` typed in a shell argument mean a newline and a tab (``\\``: a backslash)."""
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], text)


def sample_arguments(commands) -> None:
    p = commands.add_parser(
        "sample",
        help="continue a prompt (task models such as the puzzle answer it)",
        description="Continue a prompt with a language model, or ask a task model (the puzzle) a question. "
        "Sample i of --num-samples N is drawn with seed SEED+i: `--seed SEED+i` alone gives it again.",
    )
    p.add_argument("name", help="the variant to sample (see `zoo list`)")
    p.add_argument(
        "--prompt",
        help="the text to continue (the puzzle: the sentence to answer); '-' reads it from standard input (at most 16 MiB)",
    )
    p.add_argument(
        "--prompt-file", type=Path, metavar="PATH", help="read the prompt from this UTF-8 file (at most 16 MiB)"
    )
    p.add_argument("--max-new-tokens", type=int, default=100, help="how many tokens to draw at most")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the (first) sample's draws: any whole number from -2**63 to 2**64-1",
    )
    p.add_argument("--temperature", type=float, default=1.0, help="divides the logits; 0 is greedy decoding")
    p.add_argument("--greedy", action="store_true", help="always take the most likely token (same as --temperature 0)")
    p.add_argument("--top-k", type=int, default=None, help="draw only among the K most likely tokens (default: all)")
    p.add_argument(
        "--top-p",
        type=float,
        default=None,
        help="draw only among the most likely tokens that together reach probability P (default: all)",
    )
    p.add_argument(
        "--min-p",
        type=float,
        default=None,
        metavar="P",
        help="draw only among tokens at least P times as likely as the most likely one, 0 to 1 (default: all)",
    )
    p.add_argument("--num-samples", type=int, default=1, help="how many samples to draw, as one batch")
    p.add_argument(
        "--stop",
        action="append",
        metavar="STRING",
        help=r"end the sample before this text (\n is a newline, \t a tab); may be repeated (default: none)",
    )
    p.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="print tokens as they are drawn (default: on a terminal, for one sample without --json)",
    )
    p.add_argument("--json", action="store_true", help="print the prompt, tokens, text and settings as JSON")
    p.add_argument("--explain", action="store_true", help="task models: show the residual stream and attention")
    p.add_argument("--png", type=Path, help="task models: write the attention maps to this PNG (default: none)")
    device_options(p, "sample", threads=True)
    continuation = (*OPTION_NAMES, *_DISPLAY_OPTIONS)
    p.set_defaults(run=cmd_sample, option_defaults={option: p.get_default(option) for option in continuation})


def cmd_sample(args) -> int:
    if args.greedy:
        args.temperature = 0.0
    # Check what the user typed before paying for torch and the checkpoint.
    settings = sampling_settings(args, stop=[_unescape(stop) for stop in args.stop or []])
    prompt = read_prompt(args.prompt, args.prompt_file)
    if not prompt:
        raise ZooError("the prompt is empty; give some text to continue (--prompt TEXT)")
    model = load_on_threads(args)
    if implements(model.network, TaskModel):  # task models (the puzzle) answer instead of continuing
        ignored = [
            option
            for option, default in args.option_defaults.items()
            if hasattr(args, option) and getattr(args, option) != default
        ]
        if ignored:
            flags = ", ".join("--" + option.replace("_", "-") for option in ignored)
            print(
                f"zoo: note: '{args.name}' answers the prompt rather than continuing it; {flags} "
                f"{'does' if len(ignored) == 1 else 'do'} not apply",
                file=sys.stderr,
            )
        answer = model.network.ask(model.tokenizer, prompt, explain=args.explain, png=args.png)
        print(json.dumps({"name": model.name, "prompt": prompt, "answer": answer}, indent=2) if args.json else answer)
        return 0
    if args.explain or args.png:
        raise ZooError(f"--explain and --png are for task models such as the puzzle; '{args.name}' continues text")
    stream = (
        args.stream if args.stream is not None else (sys.stdout.isatty() and not args.json and args.num_samples == 1)
    )
    if stream and (args.json or args.num_samples > 1):
        raise ZooError("--stream shows one sample as plain text; drop --json and --num-samples, or --stream")
    if stream:
        # What is printed stays printed: Ctrl-C ends the sample (exit 130) but
        # keeps the text so far on the terminal.
        print(prompt, end="", flush=True)
        try:
            for piece in model.stream(prompt, settings):
                print(piece, end="", flush=True)
        finally:
            print(flush=True)
        return 0
    samples = model.sample(prompt, settings)
    if args.json:
        print(
            json.dumps(
                {
                    "name": model.name,
                    "settings": settings.as_dict(),
                    "samples": [sample.as_dict() for sample in samples],
                },
                indent=2,
            )
        )
    elif len(samples) == 1:
        print(samples[0].prompt + samples[0].text)
    else:
        for number, sample in enumerate(samples, 1):
            print(f"--- sample {number} of {len(samples)} (seed {sample.seed}) ---\n{sample.prompt + sample.text}")
    return 0
