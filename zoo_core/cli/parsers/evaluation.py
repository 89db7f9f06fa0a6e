"""The parsers of scoring and looking inside variants: eval, compare, attention, inspect. Their handlers are in zoo_core/cli/evaluation.py."""

from __future__ import annotations

from pathlib import Path

from .. import completers
from ..completers import complete_with
from .options import device_options


def eval_arguments(commands) -> None:
    p = commands.add_parser("eval", help="measure a variant: validation loss and perplexity (or its task score)")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument(
        "--windows",
        type=int,
        default=None,
        help="evaluation windows per split (default: the recipe's, fewer where the model's size needs)",
    )
    data = p.add_argument(
        "--data",
        metavar="NAME|PATH",
        help="evaluate on this registered dataset's (`zoo datasets`) or text file's validation split "
        "(default: the recipe's corpus)",
    )
    complete_with(data, completers.datasets_and_files)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    device_options(p, "evaluate", threads=True)
    p.add_argument(
        "--text-chars",
        type=int,
        default=None,
        metavar="N",
        help="bits per byte on the first N characters of the validation split (default: all of it)",
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="write validation bits per byte and per character into the variant's card (its registry file)",
    )
    p.add_argument(
        "--context",
        type=int,
        default=None,
        metavar="N",
        help="score with windows and history of at most N tokens: seconds rather than minutes for a model "
        "of a long context (default: the card's context length)",
    )
    p.set_defaults(run="evaluation:cmd_eval")


def compare_arguments(commands) -> None:
    p = commands.add_parser("compare", help="score variants on the same windows; deltas and same-seed samples")
    p.add_argument("names", nargs="+", metavar="NAME", help="the variants to compare; the first is the baseline")
    p.add_argument(
        "--windows", type=int, default=None, help="windows per split (default: 320, fewer where the models' size needs)"
    )
    p.add_argument("--seed", type=int, default=42, help="chooses the windows and the sampling draws")
    p.add_argument("--prompt", help="the samples' prompt (default: the start of the training text)")
    p.add_argument("--max-new-tokens", type=int, default=100, help="tokens drawn per sample")
    data = p.add_argument(
        "--data",
        metavar="NAME|PATH",
        help="score on this registered dataset (`zoo datasets`) or text file; needed when the variants were trained "
        "on different text (default: the recipe's corpus)",
    )
    complete_with(data, completers.datasets_and_files)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--out", type=Path, help="also write the samples side by side as a PNG (default: none)")
    device_options(p, "score and sample")
    p.add_argument(
        "--bits-per-byte",
        action="store_true",
        help="score in bits per byte on the validation text (automatic when the tokenizers differ)",
    )
    p.add_argument(
        "--text-chars",
        type=int,
        default=None,
        metavar="N",
        help="bits per byte: score the first N characters of the validation split (default: all of it)",
    )
    p.add_argument(
        "--context",
        type=int,
        default=None,
        metavar="N",
        help="score with windows and history of at most N tokens (default: each card's context length)",
    )
    p.set_defaults(run="evaluation:cmd_compare")


def attention_arguments(commands) -> None:
    p = commands.add_parser("attention", help="attention maps per layer and head for a prompt")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--prompt", required=True, help="the text whose attention to show")
    p.add_argument("--out", type=Path, help="write a PNG instead of printing the maps (default: print)")
    device_options(p, "compute the maps")
    p.set_defaults(run="evaluation:cmd_attention")


def inspect_arguments(commands) -> None:
    p = commands.add_parser(
        "inspect",
        help="look inside a variant through its hook points: logit lens, head ablation, activation patching",
        description="Look inside a variant through its hook points (docs/inspect.md): --logit-lens, "
        "--ablate LAYER.HEAD and --patch --corrupt TEXT. Layers and heads count from 0, as hook point names do.",
    )
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--prompt", help="the text to inspect (the clean prompt of --patch) (default: none)")
    p.add_argument(
        "--logit-lens",
        action="store_true",
        help="the next-token prediction read from each layer's residual stream through the final norm and head",
    )
    p.add_argument(
        "--ablate",
        metavar="LAYER.HEAD[,...]",
        help="the change in validation loss with these heads removed together, e.g. 0.1,1.0 (for the puzzle: "
        "how many answers change); 'each' removes every head alone in turn (default: none)",
    )
    p.add_argument(
        "--ablation",
        choices=("zero", "mean"),
        default="zero",
        help="how --ablate removes a head: zero its output, or put in its mean over the validation windows",
    )
    p.add_argument(
        "--windows",
        type=int,
        default=None,
        help="validation windows for --ablate (default: the recipe's, fewer where the sweep's size needs)",
    )
    p.add_argument(
        "--context",
        type=int,
        default=None,
        metavar="N",
        help="tokens per validation window of --ablate (default: the card's context length)",
    )
    p.add_argument(
        "--patch",
        action="store_true",
        help="patch the --prompt run's residual stream into the --corrupt run, per layer and position",
    )
    p.add_argument("--corrupt", metavar="TEXT", help="the corrupted prompt of --patch, as many tokens (default: none)")
    p.add_argument(
        "--routing",
        action="store_true",
        help="for a mixture of experts: per layer, how many of the --prompt's tokens each expert took",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="also draw the logit lens or the patching grid: .svg (no extra needed) or .png (the plots extra) "
        "(default: none)",
    )
    p.add_argument(
        "--verify-roles",
        action="store_true",
        help="check every head role the network's explanation states by ablating that head (the puzzle): "
        "a table, head by head; exit status 1 unless every role holds",
    )
    p.add_argument("--json", action="store_true", help="print every view asked for as JSON")
    device_options(p, "run the variant")
    p.set_defaults(run="evaluation:cmd_inspect")
