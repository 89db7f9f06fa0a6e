"""Options and output shared by several command families."""

from __future__ import annotations

import argparse
from typing import Collection, Sequence

from ..device_names import DEVICE_CHOICES, DTYPE_CHOICES, device_argument
from ..loading.api import get_variant, load_variant
from .help import DefaultsHelpFormatter


def format_table(headers: list[str], rows: Sequence[Sequence[object]], right: Collection[int] = frozenset()) -> str:
    from .tables import render_table

    return render_table(headers, rows, right)


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


def load_on_threads(args):
    """``args.name`` loaded for `zoo sample` and `zoo eval` (``--device``,
    ``--dtype``), torch's threads set from ``--threads`` or the model's size
    before loading, since loading is torch work too."""
    from ..inference.threads import (
        check_threads,
        use_threads,
        use_threads_before_loading,
    )

    check_threads(args.threads)  # before paying for the catalogue and the checkpoint
    variant = get_variant(args.name)
    use_threads_before_loading(variant.card.parameters, args.threads)
    model = load_variant(variant, device=args.device, dtype=args.dtype)
    use_threads(model.network, args.threads)
    return model


def sampling_settings(args, **overrides):
    """The ``SamplingSettings`` of a command that samples: every setting it has a
    flag for, by the flag's name (``--top-p`` is ``top_p``), errors naming the
    flags; ``overrides`` for values the command reads differently."""
    from ..inference.settings import OPTION_NAMES, SamplingSettings  # not on `zoo list`'s path

    given = {name: getattr(args, name) for name in OPTION_NAMES if hasattr(args, name)}
    return SamplingSettings(**{**given, **overrides}, flags=True)


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
