"""Making variants: train (one process or data-parallel), experiment, train-tokenizer."""

from __future__ import annotations

import json
import os
import shlex
import tomllib
from pathlib import Path

from ..errors import ZooError
from .options import device_options

CHECKPOINTS = Path("checkpoints")  # train-tokenizer writes here, in the working folder


def _resume_command(argv: list[str]) -> str:
    """The command line that continues this run: the same one, with --resume."""
    return shlex.join(["zoo", *argv, *([] if "--resume" in argv else ["--resume"])])


# The options of `zoo train` that make up its TrainingJob: the job's field (also
# argparse's dest) and the option, read both ways: into the job, and back into
# the command line each data-parallel worker is handed.
_JOB_OPTIONS = {
    "steps": "--steps",
    "seed": "--seed",
    "data": "--data",
    "out": "--out",
    "publish": "--publish",
    "new_name": "--name",
    "resume": "--resume",
    "checkpoint_every": "--checkpoint-every",
    "interim_eval_windows": "--interim-eval-windows",
    "log_every": "--log-every",
    "quiet": "--quiet",
    "compile": "--compile",
    "device": "--device",
    "dtype": "--dtype",
    "skip_unknown": "--skip-unknown",
    "grad_accum": "--grad-accum",
    "log_to": "--log-to",
}

# Options that set one recipe field for this run: the option's dest and the field.
_RECIPE_SHORTCUTS = {"learning_rate": "learning_rate", "keep": "keep", "patience": "patience", "trainer": "kind"}


def parse_setting(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--set``: the value read as a TOML value (``3e-4``,
    ``64``, ``true``, ``"cosine"``), else taken as the text it is (``cosine``);
    the recipe's schema then validates it."""
    key, separator, value = text.partition("=")
    key = key.strip()
    if not separator or not key:
        raise ZooError(f"--set {text!r}: expected KEY=VALUE, e.g. --set learning_rate=3e-4 (see `zoo card-schema`)")
    try:
        return key, tomllib.loads(f"value = {value}")["value"]
    except tomllib.TOMLDecodeError:
        return key, value


def training_job(args, resume_command: str | None = None):
    """The `TrainingJob` that `zoo train`'s arguments ask for (validated as it is built);
    a data-parallel worker builds its own from the same arguments."""
    from ..training.job import TrainingJob

    options = {field: getattr(args, field) for field in _JOB_OPTIONS}
    options["log_to"] = tuple(args.log_to or ())
    overrides = dict(parse_setting(text) for text in args.set or ())
    overrides.update(
        {field: getattr(args, dest) for dest, field in _RECIPE_SHORTCUTS.items() if getattr(args, dest) is not None}
    )
    variant = args.name
    if args.from_variant is not None:  # zoo train NEW --from BASE: fine-tune BASE into NEW
        if args.new_name is not None:
            raise ZooError(
                "--name: with --from the new variant's name is the first argument (zoo train NEW --from BASE)"
            )
        variant, options["new_name"] = args.from_variant, args.name
        options["publish"] = options["publish"] or args.out is None  # a fine-tune is published unless sent to --out
    return TrainingJob(
        variant=variant,
        from_weights=args.from_variant is not None,
        recipe_overrides=overrides or None,
        resume_command=resume_command,
        **options,
    )


def _worker_arguments(job, args) -> list[str]:
    """The command line each worker is handed: this one again, less the launch options."""
    given = [(option, getattr(job, field)) for field, option in _JOB_OPTIONS.items()]
    given += [("--registry", registry) for registry in [*args.registry, *args.sub_registry]]
    worker = [job.variant]
    if job.from_weights:
        worker = [job.new_name, "--from", job.variant]
        given = [(option, value) for option, value in given if option != "--name"]
    for key, value in (job.recipe_overrides or {}).items():
        worker += ["--set", f"{key}={json.dumps(value)}"]
    for option, value in [*given, ("--debug", args.debug)]:
        if value is True:  # a flag
            worker.append(option)
        elif option == "--grad-accum" and value == 1:
            continue
        elif isinstance(value, tuple):  # a repeatable option
            for entry in value:
                worker += [option, entry]
        elif value is not None and value is not False:
            worker += [option, str(value)]
    return worker


def _launch_data_parallel(args, job) -> int:
    """`zoo train --nproc-per-node N`: the same run on N processes (per machine) through torchrun."""
    from ..training.distributed import launch
    from ..training.run import check_data_parallel_run

    nproc, nnodes = (1 if value is None else value for value in (args.nproc_per_node, args.nnodes))
    if nproc < 1 or nnodes < 1:
        raise ZooError("--nproc-per-node and --nnodes must be at least 1")
    state_path = check_data_parallel_run(job, nproc * nnodes)
    return launch(
        _worker_arguments(job, args),
        nproc_per_node=nproc,
        nnodes=nnodes,
        node_rank=args.node_rank,
        rdzv_endpoint=args.rdzv_endpoint,
        state_path=state_path,
        debug=args.debug,
    )


def _worker(args) -> int:
    """This process's share of a data-parallel run torchrun started (`zoo_core.training.distributed`)."""
    from ..training.distributed import run_worker

    if args.nproc_per_node is not None or args.nnodes is not None:
        raise ZooError("a torchrun worker takes no --nproc-per-node or --nnodes: give them to torchrun")
    return run_worker(training_job(args), [*args.registry, *args.sub_registry], args.debug)


def train_arguments(commands) -> None:
    p = commands.add_parser(
        "train",
        help="train a variant from its card's recipe, or fine-tune one on your text (zoo train NEW --from VARIANT)",
    )
    _what_to_train_arguments(p)
    _destination_arguments(p)
    _how_to_run_arguments(p)
    _data_parallel_arguments(p)
    p.set_defaults(run=cmd_train)


def _what_to_train_arguments(p) -> None:
    """The variant, its text and the recipe settings of this run."""
    p.add_argument("name", help="the variant to train (see `zoo list`); with --from, the new variant's name")
    p.add_argument(
        "--from",
        dest="from_variant",
        metavar="VARIANT",
        help="fine-tune: start from VARIANT's verified weights, architecture and tokenizer, and publish the "
        "result as NAME in your catalogue (or in --out)",
    )
    p.add_argument(
        "--data",
        metavar="NAME|PATH",
        help="train on this registered dataset (`zoo datasets`) or text file (default: the recipe's corpus)",
    )
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
    p.add_argument(
        "--trainer", metavar="KIND", help="train with this registered trainer, e.g. lora (default: the recipe's kind)"
    )
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


def _how_to_run_arguments(p) -> None:
    """Progress, logs, saved states, compiling, device and precision."""
    p.add_argument("--quiet", action="store_true", help="no progress display")
    log_to_option(p, "NAME.log.jsonl beside the checkpoint")
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


def cmd_train(args) -> int:
    from ..training.run import train_variant

    if os.environ.get("ZOO_TORCHRUN_WORKER"):  # training.distributed.TORCHRUN_WORKER: one process of a run
        return _worker(args)
    job = training_job(args, resume_command=_resume_command(args.argv))
    if args.nproc_per_node is not None or args.nnodes is not None:
        return _launch_data_parallel(args, job)
    card, registry_file = train_variant(job)
    metrics = card.metrics
    if metrics.validation_loss is None:  # a trainer that measures something else (the puzzle's accuracy)
        measured = ", ".join(
            f"{key} {value}" for key, value in metrics.model_dump(exclude_none=True).items() if key != "loss_unit"
        )
        print(f"{card.name}: {card.recipe.kind}: {measured or 'no metrics'}; sha256 {card.checkpoint.sha256}")
    else:
        print(
            f"{card.name}: train {metrics.train_loss:.4f}, validation {metrics.validation_loss:.4f} nats/token "
            f"after {card.recipe.steps} steps ({metrics.training_seconds:.0f} s, {metrics.tokens_per_second:,.0f} tokens/s)"
        )
    print(f"  card in {registry_file}")
    if not job.publish:
        print(f"  use it: {_use_it_command(registry_file, card.name)} sample {card.name} --prompt ...")
    return 0


def _use_it_command(registry_file: Path, name: str) -> str:
    """The `zoo` that resolves ``name`` to the run just written: `--registry` adds
    the run's file to the catalogue, unless the name is declared elsewhere too
    (say a shipped variant retrained into --out), which every command refuses;
    then `--only-registry` reads the run's file alone."""
    from ..catalogue.layers import build_catalogue

    try:
        holder = build_catalogue().find(name)
        elsewhere = holder is not None and holder.source != registry_file.resolve()
    except ZooError:  # an unreadable layer: the run's file alone still works
        elsewhere = True
    option = "--only-registry" if elsewhere else "--registry"
    return f"zoo {option} {shlex.quote(str(registry_file))}"


def log_to_option(parser, default: str) -> None:
    parser.add_argument(
        "--log-to",
        action="append",
        metavar="KIND[=WHERE]",
        help=f"also log the run as it goes to tensorboard, mlflow or csv, beside the run or in KIND=FOLDER "
        f"(mlflow=TRACKING_URI too); repeatable (default: only the jsonl log, always written: {default})",
    )


def experiment_arguments(commands) -> None:
    p = commands.add_parser("experiment", help="paired-seed study: arms trained in lockstep on identical batches")
    p.add_argument(
        "study", nargs="?", help="a study of experiments/studies.toml (depth-1-2, depth-4-6-8, context, positions)"
    )
    p.add_argument(
        "--arms", nargs="+", metavar="VARIANT[@CONTEXT]", help="an ad-hoc study of these variants (default: none)"
    )
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
        "--data",
        metavar="NAME|PATH",
        help="train and score on this registered dataset or text file (default: the recipe's corpus)",
    )
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
    p.set_defaults(run=cmd_experiment)


def cmd_experiment(args) -> int:
    from ..training.studies import StudyConfig, curve_eval_every, load_study, run_study

    if bool(args.study) == bool(args.arms):
        raise ZooError("name a study (see experiments/studies.toml) or give --arms, not both")
    study = load_study(args.study) if args.study else StudyConfig(name="custom", arms=args.arms)
    if args.cross_evaluate:
        study.cross_evaluate = True
    for key in ("steps", "seeds", "milestones", "eval_every", "eval_targets", "prompt"):
        if getattr(args, key) is not None:
            setattr(study, key, getattr(args, key))
    if min(study.steps, study.eval_every, study.eval_targets) < 1 or not study.seeds:
        raise ZooError("--steps, --eval-every and --eval-targets must be at least 1, and --seeds needs a seed")
    if min(study.milestones, default=1) < 1:
        raise ZooError(f"--milestones must be steps of at least 1, not {min(study.milestones)}")
    if args.eval_every is None:  # enough points for a curve whatever --steps is
        study.eval_every = curve_eval_every(study.steps, study.eval_every)
    out = args.out or Path("runs") / "experiments" / study.name
    report = run_study(
        study,
        out,
        data=args.data,
        show_progress=not args.quiet,
        device=args.device,
        dtype=args.dtype,
        jobs=args.jobs,
        log_to=tuple(args.log_to or ()),
    )
    print(f"{study.name}: {len(report['runs'])} runs -> {out / 'results.json'}, {out / 'loss.png'}")
    for arm in dict.fromkeys(run["arm"] for run in report["runs"]):
        finals = [run["history"][-1]["validation"] for run in report["runs"] if run["arm"] == arm]
        print(f"  {arm}: validation {sum(finals) / len(finals):.4f} (seeds {min(finals):.4f}–{max(finals):.4f})")
    return 0


def train_tokenizer_arguments(commands) -> None:
    p = commands.add_parser("train-tokenizer", help="train the BPE vocabulary (or collect the character set)")
    p.add_argument(
        "--kind",
        default="bpe",
        help="a registered tokenizer that can be trained: 'bpe', 'char' or a plugin's (default: bpe)",
    )
    p.add_argument(
        "--data",
        default="tinyshakespeare",
        help="a registered dataset's name or a text file (default: tinyshakespeare)",
    )
    p.add_argument("--vocab-size", type=int, default=1024, help="BPE only: tokens in the vocabulary")
    p.add_argument("--train-fraction", type=float, default=0.9, help="BPE only: the share of the text it trains on")
    p.add_argument("--out", type=Path, help="default: checkpoints/bpe-<size>.tiktoken or checkpoints/char-<size>.json")
    p.set_defaults(run=cmd_train_tokenizer)


def cmd_train_tokenizer(args) -> int:
    from ..corpus.tokenizer_training import train_tokenizer
    from ..plugin_api.manager import get_plugins

    out, summary = train_tokenizer(
        args.kind, args.data, args.vocab_size, args.train_fraction, args.out, CHECKPOINTS, get_plugins()
    )
    print(f"{summary} -> {out}")
    return 0
