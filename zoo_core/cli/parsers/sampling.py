"""The parsers of drawing text from a variant: sample. Their handlers are in zoo_core/cli/sampling.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...inference.settings import OPTION_NAMES  # no torch
from .options import device_options

# Options of `zoo sample` that only language models use: these, and a flag per
# sampling setting (named by SamplingSettings). Task models (the puzzle) answer
# the prompt instead and say which of them were given and ignored.
_DISPLAY_OPTIONS = ("greedy", "stream")


def sample_arguments(commands) -> None:
    p = commands.add_parser(
        "sample",
        help="continue a prompt (task models such as the puzzle answer it)",
        description="Continue a prompt with a language model, or ask a task model (the puzzle) a question. "
        "Sample i of --num-samples N is drawn with seed SEED+i: `--seed SEED+i` alone gives it again "
        "(a quantised variant's after some tokens parts from it: docs/scaling.md).",
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
    p.set_defaults(
        run="sampling:cmd_sample", option_defaults={option: p.get_default(option) for option in continuation}
    )
