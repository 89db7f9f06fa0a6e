"""Options several command families' parsers share: --device and --dtype, and
the actions of a command whose bare form lists."""

from __future__ import annotations

import argparse

from ...device_names import DEVICE_CHOICES, DTYPE_CHOICES, device_argument
from ..help import DefaultsHelpFormatter


def device_options(parser: argparse.ArgumentParser, what: str, training: bool = False, threads: bool = False) -> None:
    """--device and --dtype; with ``threads``, --threads too (commands that run a loaded model)."""
    parser.add_argument(
        "--device",
        type=device_argument,
        default="auto",
        metavar="DEVICE",
        help=f"where to {what}: {DEVICE_CHOICES}; auto picks CUDA, then MPS, then the CPU (default: auto)",
    )
    how = (
        "the forward pass runs under autocast in it, weights stay float32; float16 adds a gradient scaler"
        if training
        else "the network's weights are cast to it"
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default="float32",
        help=f"floating-point type to {what} in: {how} (default: float32)",
    )
    if threads:
        parser.add_argument(
            "--threads",
            type=int,
            metavar="N",
            help="CPU threads (default: 1 for models under 5M parameters, else torch's default)",
        )
        quantize_option(parser)


def quantize_option(parser: argparse.ArgumentParser) -> None:
    """--quantize (commands that run a loaded model on the CPU)."""
    parser.add_argument(
        "--quantize",
        choices=("int8",),
        help="int8: the linear layers' weights in 8-bit integers, on the CPU (faster decoding, "
        "slightly different logits; docs/benchmarks.md) (default: float weights)",
    )


def listing_actions(parser: argparse.ArgumentParser, dest: str, help: str):
    """Give ``parser`` actions (``zoo datasets add``, ``zoo remote remove``...) for a
    command whose bare form lists, ``--json`` included; returns the function that
    adds one action. Its ``list`` takes ``--json`` too, before or after the word."""
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    actions = parser.add_subparsers(dest=dest, metavar="ACTION", help=help)

    def action(name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
        added = actions.add_parser(
            name,
            help=help,
            description=description or help[0].upper() + help[1:] + ".",
            formatter_class=DefaultsHelpFormatter,
        )
        if name == "list":
            # SUPPRESS: `zoo COMMAND --json list` keeps the --json given before the action.
            added.add_argument(
                "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON (default: off)"
            )
        return added

    return action


def download_options(parser: argparse.ArgumentParser) -> None:
    """--deadline and --min-rate of a command that downloads (zoo_core.sharing.download)."""
    parser.add_argument(
        "--deadline",
        type=float,
        metavar="SECONDS",
        help="give up a download (retries included) that is not done in this time "
        "(default: $ZOO_DOWNLOAD_DEADLINE, else 3600)",
    )
    parser.add_argument(
        "--min-rate",
        type=float,
        metavar="BYTES_PER_S",
        help="give up a download slower than this over 10 s, 0 for no minimum "
        "(default: $ZOO_DOWNLOAD_MIN_RATE, else 1024)",
    )
