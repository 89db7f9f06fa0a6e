"""Making variants: train (one process or data-parallel), merge, experiment, train-tokenizer."""

from __future__ import annotations

import json
import os
import shlex
import tomllib
from pathlib import Path

from ..catalogue.layers import build_catalogue
from ..corpus.tokenizer_training import train_tokenizer
from ..errors import ZooError
from ..loading.merging import merge_adapter_variant
from ..plugin_api.manager import get_plugins
from ..training.distributed import launch, run_worker
from ..training.job import TrainingJob
from ..training.run import check_data_parallel_run, early_stop, run_log_folder, train_variant
from ..training.run_log import read_run_header, whereabouts
from ..training.studies import StudyConfig, curve_eval_every, load_study, run_study
from ..training.study_table import arm_rows, write_table

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
    "replace": "--replace",
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
    "log_checkpoints": "--log-checkpoints",
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
    if args.nproc_per_node is not None or args.nnodes is not None:
        raise ZooError("a torchrun worker takes no --nproc-per-node or --nnodes: give them to torchrun")
    return run_worker(training_job(args), [*args.registry, *args.sub_registry], args.debug)


def cmd_train(args) -> int:
    if os.environ.get("ZOO_TORCHRUN_WORKER"):  # training.distributed.TORCHRUN_WORKER: one process of a run
        return _worker(args)
    job = training_job(args, resume_command=_resume_command(args.argv))
    if args.nproc_per_node is not None or args.nnodes is not None:
        return _launch_data_parallel(args, job)
    card, registry_file = train_variant(job)
    metrics, recipe = card.metrics, card.training_recipe()
    if metrics.validation_loss is None:  # a trainer that measures something else (the puzzle's accuracy)
        measured = ", ".join(
            f"{key} {value}" for key, value in metrics.model_dump(exclude_none=True).items() if key != "loss_unit"
        )
        print(f"{card.name}: {recipe.kind}: {measured or 'no metrics'}; sha256 {card.checkpoint.sha256}")
    else:
        ran = f"after {recipe.steps} steps" if metrics.stopped_at is None else early_stop(metrics.stopped_at, recipe)
        print(
            f"{card.name}: train {metrics.train_loss:.4f}, validation {metrics.validation_loss:.4f} nats/token "
            f"{ran} ({metrics.training_seconds:.0f} s, {metrics.tokens_per_second:,.0f} tokens/s)"
        )
    print(f"  card in {registry_file}")
    logs = run_log_folder(registry_file, card.name, job.publish)
    header = read_run_header(logs / f"{card.name}.log.jsonl")
    if header is not None:  # where this run's logs went, as its jsonl log records them
        print(f"  {whereabouts(logs, header['logs'])}")
    if not job.publish:
        print(f"  use it: {_use_it_command(registry_file, card.name)} sample {card.name} --prompt ...")
    return 0


def cmd_merge(args) -> int:
    card, registry_file, difference = merge_adapter_variant(args.name, args.new_name)
    print(
        f"{card.name}: '{args.name}' merged into '{card.training_recipe().base}', {card.parameters:,} parameters "
        f"-> {registry_file.parent / card.checkpoint.path}"
    )
    print(f"  checked: logits within {difference:.1e} of the adapter applied on the fly; card in {registry_file}")
    return 0


def _use_it_command(registry_file: Path, name: str) -> str:
    """The `zoo` that resolves ``name`` to the run just written: `--registry` adds
    the run's file to the catalogue, unless the name is declared elsewhere too
    (say a shipped variant retrained into --out), which every command refuses;
    then `--only-registry` reads the run's file alone."""
    try:
        holder = build_catalogue().find(name)
        elsewhere = holder is not None and holder.source != registry_file.resolve()
    except ZooError:  # an unreadable layer: the run's file alone still works
        elsewhere = True
    option = "--only-registry" if elsewhere else "--registry"
    return f"zoo {option} {shlex.quote(str(registry_file))}"


def cmd_experiment(args) -> int:
    if bool(args.study) == bool(args.arms):
        raise ZooError("name a study (see experiments/studies.toml) or give --arms, not both")
    study = load_study(args.study) if args.study else StudyConfig(name="custom", arms=args.arms)
    if args.cross_evaluate:
        study.cross_evaluate = True
    if args.score_text:
        study.score_text = True
    if args.table and not study.score_text:
        raise ZooError(f"--table needs the validation text scored: study '{study.name}' does not; add --score-text")
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
    if study.score_text:
        _write_study_table(report, [out / "results.csv", *([args.table] if args.table else [])])
    return 0


def _write_study_table(report: dict, paths: list[Path]) -> None:
    rows = arm_rows(report)
    for path in paths:
        write_table(rows, path)
    print(f"bits per byte over the whole validation text, 95% t intervals over seeds -> {', '.join(map(str, paths))}")
    for row in rows:
        delta = (
            ""
            if row["bits_per_byte_delta_ci95"] is None
            else (
                f", {row['bits_per_byte_delta']:+.4f} ± {row['bits_per_byte_delta_ci95']:.4f} against {rows[0]['variant']}"
            )
        )
        spread = "" if row["bits_per_byte_ci95"] is None else f" ± {row['bits_per_byte_ci95']:.4f}"
        print(
            f"  {row['variant']}: {row['bits_per_byte']:.4f}{spread}{delta}; "
            f"{row['train_cpu_seconds']:.1f} CPU s ({row['tokens_per_cpu_second']:,.0f} tokens per CPU second)"
        )


def cmd_train_tokenizer(args) -> int:
    out, summary = train_tokenizer(
        args.kind, args.data, args.vocab_size, args.train_fraction, args.out, CHECKPOINTS, get_plugins()
    )
    print(f"{summary} -> {out}")
    return 0
