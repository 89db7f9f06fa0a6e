"""The parsers of making variants: train (one process or data-parallel), experiment, train-tokenizer. Their handlers are in zoo_core/cli/training.py."""

from __future__ import annotations

from pathlib import Path

from .. import completers
from ..completers import complete_with
from .options import device_options


def train_arguments(commands) -> None:
    p = commands.add_parser(
        "train",
        help="train a variant from its card's recipe, or fine-tune one on your text (zoo train NEW --from VARIANT)",
    )
    _what_to_train_arguments(p)
    _destination_arguments(p)
    _how_to_run_arguments(p)
    _data_parallel_arguments(p)
    p.set_defaults(run="training:cmd_train")


def _what_to_train_arguments(p) -> None:
    """The variant, its text and the recipe settings of this run."""
    p.add_argument("name", help="the variant to train (see `zoo list`); with --from, the new variant's name")
    from_variant = p.add_argument(
        "--from",
        dest="from_variant",
        metavar="VARIANT",
        help="fine-tune: start from VARIANT's verified weights, architecture and tokenizer, and publish the "
        "result as NAME in your catalogue (or in --out)",
    )
    complete_with(from_variant, completers.variant_names)
    data = p.add_argument(
        "--data",
        metavar="NAME|PATH",
        help="train on this registered dataset (`zoo datasets`) or text file (default: the recipe's corpus)",
    )
    complete_with(data, completers.datasets_and_files)
    p.add_argument("--steps", type=int, help="number of updates (default: the recipe's)")
    p.add_argument("--seed", type=int, help="seed of weights, batches and dropout (default: the recipe's)")
    p.add_argument("--learning-rate", type=float, metavar="LR", help="peak learning rate (default: the recipe's)")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="set one recipe field for this run, e.g. --set batch_size=64 (repeatable; validated like a card, "
        "recorded in the trained card; `zoo card-schema` lists the fields)",
    )
    trainer = p.add_argument(
        "--trainer", metavar="KIND", help="train with this registered trainer, e.g. lora (default: the recipe's kind)"
    )
    complete_with(trainer, completers.trainer_names)
    p.add_argument(
        "--grad-accum",
        type=int,
        default=1,
        metavar="N",
        help="split each batch into N micro-batches whose gradients add up to one update: the same result "
        "in less memory (default 1)",
    )
    p.add_argument(
        "--keep",
        choices=["last", "best"],
        help="end with the last step's weights (default) or those of the evaluation with the lowest validation loss",
    )
    p.add_argument(
        "--patience",
        type=int,
        metavar="N",
        help="stop early after N evaluations without a lower validation loss (recorded in the card)",
    )
    p.add_argument(
        "--skip-unknown",
        action="store_true",
        help="drop characters the variant's vocabulary has no token for (counted and reported) instead of refusing",
    )


def _destination_arguments(p) -> None:
    """Where the trained variant goes, under which name."""
    p.add_argument("--out", type=Path, help="output folder (default runs/NAME)")
    p.add_argument(
        "--publish",
        action="store_true",
        help="add the result to your catalogue ($ZOO_HOME, default ~/.local/share/zoo), or to the last --registry FILE",
    )
    p.add_argument(
        "--name", dest="new_name", metavar="NEW", help="name of the trained variant (default: the variant's own name)"
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="publish over a variant of that name already in your catalogue; its weights, card and log stay "
        "until the new ones are committed (default: refused, naming it and its steps)",
    )


def _how_to_run_arguments(p) -> None:
    """Progress, logs, saved states, compiling, device and precision."""
    p.add_argument("--quiet", action="store_true", help="no progress display")
    log_to_option(p, "NAME.log.jsonl in the run's folder, or in CATALOGUE/runs/NAME/ when published")
    p.add_argument(
        "--log-checkpoints",
        action="store_true",
        help="with --log-to mlflow, keep the weights in the MLflow run too (default: only the card and history)",
    )
    p.add_argument(
        "--log-every",
        type=int,
        metavar="N",
        help="when not on a terminal, print a progress line every N steps (default: about 20 lines per run)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        metavar="N",
        help="save the resumable training state every N steps (default: the recipe's eval_every; 0: never)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run from its saved state (same --steps/--seed/--data/--out)",
    )
    p.add_argument(
        "--interim-eval-windows",
        type=int,
        metavar="N",
        help="windows per split for the evaluations before the last (default: a quarter of the recipe's "
        "eval_windows, at least 64); the final evaluation always uses all of them",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="run forward and backward through torch.compile (needs a C compiler on CPU; same weights and card)",
    )
    device_options(p, "train", training=True)


def _data_parallel_arguments(p) -> None:
    """The launch over several processes (and machines) through torchrun."""
    p.add_argument(
        "--nproc-per-node",
        type=int,
        metavar="N",
        help="data-parallel: train on N processes on this machine through torchrun (Gloo on CPUs, one GPU each with NCCL)",
    )
    p.add_argument(
        "--nnodes", type=int, metavar="M", help="data-parallel: the number of machines taking part (default 1)"
    )
    p.add_argument(
        "--node-rank",
        type=int,
        metavar="R",
        help="data-parallel: this machine's number, 0 to M-1 (0 is the one that writes)",
    )
    p.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="data-parallel: where machine 0 listens for the others")


def log_to_option(parser, default: str) -> None:
    log_to = parser.add_argument(
        "--log-to",
        action="append",
        metavar="KIND[=WHERE]",
        help=f"also log the run as it goes to {', '.join(completers.LOG_KINDS[:-1])} or {completers.LOG_KINDS[-1]}, "
        f"beside the run or in KIND=FOLDER (mlflow=TRACKING_URI too); repeatable "
        f"(default: only the jsonl log, always written: {default})",
    )
    complete_with(log_to, completers.log_kinds)


def experiment_arguments(commands) -> None:
    p = commands.add_parser("experiment", help="paired-seed study: arms trained in lockstep on identical batches")
    p.add_argument(
        "study",
        nargs="?",
        help="a study of experiments/studies.toml (depth-1-2, depth-4-6-8, context, positions, families)",
    )
    arms = p.add_argument(
        "--arms", nargs="+", metavar="VARIANT[@CONTEXT]", help="an ad-hoc study of these variants (default: none)"
    )
    complete_with(arms, completers.variant_names)
    p.add_argument("--steps", type=int, help="updates per arm (default: the study's)")
    p.add_argument("--seeds", type=int, nargs="+", help="paired seeds, each running every arm (default: the study's)")
    p.add_argument(
        "--milestones", type=int, nargs="+", help="steps at which each arm is checkpointed (default: the study's)"
    )
    p.add_argument("--eval-every", type=int, help="steps between evaluations (default: the study's)")
    p.add_argument("--eval-targets", type=int, help="target tokens scored per split (default: the study's, 1024)")
    p.add_argument(
        "--cross-evaluate", action="store_true", help="also score every arm at every shorter context of the study"
    )
    p.add_argument("--prompt", help="prompt of the same-seed samples (default: the study's)")
    p.add_argument(
        "--score-text",
        action="store_true",
        help="score every arm's last weights in bits per byte over the whole validation text and write the "
        "study's table, results.csv (the families study does)",
    )
    p.add_argument(
        "--table",
        type=Path,
        metavar="CSV",
        help="write the table of a study that scores the text here too, e.g. results/families.csv",
    )
    data = p.add_argument(
        "--data",
        metavar="NAME|PATH",
        help="train and score on this registered dataset or text file (default: the recipe's corpus)",
    )
    complete_with(data, completers.datasets_and_files)
    p.add_argument("--out", type=Path, help="output folder (default: runs/experiments/STUDY)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    log_to_option(p, "logs/ARM-seedN.log.jsonl in the output folder")
    device_options(p, "train", training=True)
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run up to N seeds at once, each in its own process (results identical to --jobs 1; default 1)",
    )
    p.set_defaults(run="training:cmd_experiment")


def train_tokenizer_arguments(commands) -> None:
    p = commands.add_parser("train-tokenizer", help="train the BPE vocabulary (or collect the character set)")
    kind = p.add_argument(
        "--kind",
        default="bpe",
        help="a registered tokenizer that can be trained: 'bpe', 'char' or a plugin's (default: bpe)",
    )
    complete_with(kind, completers.tokenizer_kinds)
    data = p.add_argument(
        "--data",
        default="tinyshakespeare",
        help="a registered dataset's name or a text file (default: tinyshakespeare)",
    )
    complete_with(data, completers.datasets_and_files)
    p.add_argument("--vocab-size", type=int, default=1024, help="BPE only: tokens in the vocabulary")
    p.add_argument("--train-fraction", type=float, default=0.9, help="BPE only: the share of the text it trains on")
    p.add_argument("--out", type=Path, help="default: checkpoints/bpe-<size>.tiktoken or checkpoints/char-<size>.json")
    p.set_defaults(run="training:cmd_train_tokenizer")


def merge_arguments(commands) -> None:
    p = commands.add_parser(
        "merge", help="fold an adapter variant (--trainer lora) into its base: a standalone variant of whole weights"
    )
    p.add_argument("name", help="the adapter variant to merge")
    p.add_argument("--name", dest="new_name", required=True, help="the merged variant's name (in the user catalogue)")
    p.set_defaults(run="training:cmd_merge")
