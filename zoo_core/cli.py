"""The `zoo` command.

Errors a user can cause end in one line on stderr and exit status 1 (2 for bad
usage); `--debug` shows the traceback instead. Heavy imports (torch) happen inside
the commands that need them, so `zoo list` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .errors import ZooError

CHECKPOINTS = Path("checkpoints")  # train-tokenizer writes here, in the working folder


def _format_table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]

    def line(cells):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _summary(card) -> dict:
    """The facts `zoo list` shows, from the card alone."""
    config = card.config
    positions = config.get("positions", "-")
    if isinstance(positions, bool):  # the puzzle's one-hot position slots are on or off
        positions = "one-hot" if positions else "none"
    block = config.get("block")
    norm = config.get("norm", "layernorm")
    placement = "pre" if block and "pre-norm" in block else "post" if block and "post-norm" in block else block
    norm_label = f"{placement}-{ {'layernorm': 'LN', 'rmsnorm': 'RMS'}.get(norm, norm)}" if block else "-"
    return {
        "name": card.name,
        "architecture": card.architecture,
        "layers": config.get("n_layer", "-"),
        "positions": positions,
        "norm": norm_label,
        "context": card.context_length,
        "parameters": card.parameters,
        "validation_loss": card.metrics.validation_loss,
        "tokenizer": card.tokenizer.kind,
        "weights": card.checkpoint.sha256 is not None,
    }


def _warn_catalogue_problems(found) -> None:
    for problem in found.problems:
        print(f"zoo: warning: {problem}", file=sys.stderr)


def cmd_list(args) -> int:
    from .api import catalogue, unbuildable_reason

    found = catalogue()
    _warn_catalogue_problems(found)
    variants = [v for v in found.match(args.pattern) if args.source is None or v.layer == args.source]
    rows = [{**_summary(v.card), "source": v.layer, "unbuildable": unbuildable_reason(v)} for v in variants]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        where = f" in the {args.source} catalogue" if args.source else ""
        print(f"no variant matches '{args.pattern}'{where}" if args.pattern else f"no variants registered{where}", file=sys.stderr)
        return 1
    if args.markdown:
        print("| name | architecture | layers | positions | norm | context | parameters | train loss | val loss |")
        print("|---|---|---:|---|---|---:|---:|---:|---:|")
        for variant, r in zip(variants, rows):
            metrics = variant.card.metrics
            cells = [f"`{r['name']}`", r["architecture"], r["layers"], r["positions"], r["norm"], r["context"],
                     f"{r['parameters']:,}" if r["parameters"] is not None else "—",
                     *(f"{v:.4f}" if v is not None else "—" for v in (metrics.train_loss, metrics.validation_loss))]
            if metrics.accuracy is not None:  # task models are scored by accuracy, not loss
                cells[-1] = f"accuracy {metrics.accuracy:.0%}"
            print("| " + " | ".join(str(c) for c in cells) + " |")
        return 0
    headers = ["name", "architecture", "layers", "positions", "norm", "context", "parameters", "val loss", "source"]
    table = [
        [r["name"], r["architecture"], r["layers"], r["positions"], r["norm"], r["context"],
         f"{r['parameters']:,}" if r["parameters"] is not None else "-",
         "cannot build" if r["unbuildable"] else
         f"{r['validation_loss']:.4f}" if r["validation_loss"] is not None else "-" if r["weights"] else "no weights", r["source"]]
        for r in rows
    ]
    print(_format_table(headers, table, right={2, 5, 6, 7}))
    blocked = [r for r in rows if r["unbuildable"]]
    if blocked:
        print()
        for r in blocked:
            print(f"cannot build {r['name']}: {r['unbuildable']}")
    return 0


def cmd_show(args) -> int:
    from .api import get_variant
    from .registry import render_registry

    variant = get_variant(args.name)
    if args.json:
        print(json.dumps(variant.card.model_dump(mode="json", exclude_none=True), indent=2))
    else:
        print(f"# from {variant.source} ({variant.layer} catalogue, plugin '{variant.plugin}')")
        print(render_registry([variant.card]), end="")
    return 0


def cmd_load(args) -> int:
    from .api import load

    started = time.perf_counter()
    model = load(args.name)
    total = time.perf_counter() - started
    verification = model.verification
    summary = {
        "name": model.name,
        "architecture": model.card.architecture,
        "parameters": model.parameters(),
        "checkpoint": str(verification.path),
        "sha256": verification.sha256,
        "tensors": verification.tensors,
        "verified": verification.checks,
        "weights_seconds": round(verification.seconds, 4),
        "load_seconds": round(total, 4),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{model.name}: {model.card.architecture}, {summary['parameters']:,} parameters, {verification.tensors} tensors")
        print(f"  checkpoint {verification.path}")
        print(f"  verified   {', '.join(verification.checks)} (sha256 {verification.sha256[:16]}…)")
        print(f"  loaded in  {total * 1000:.0f} ms (weights {verification.seconds * 1000:.1f} ms)")
    return 0


def cmd_sample(args) -> int:
    from .sampling import check_sampling_arguments

    from .prompts import read_prompt
    from .seeding import check_seed

    # Check what the user typed before paying for torch and the checkpoint.
    check_sampling_arguments(args.max_new_tokens, args.temperature, args.top_k)
    check_seed(args.seed)
    prompt = read_prompt(args.prompt, args.prompt_file)
    if not prompt:
        raise ZooError("the prompt is empty; give some text to continue (--prompt TEXT)")
    from .api import load

    model = load(args.name)
    if hasattr(model.network, "ask"):  # task models (the puzzle) answer instead of continuing
        print(model.network.ask(model.tokenizer, prompt, explain=args.explain, png=args.png))
        return 0
    if args.explain or args.png:
        raise ZooError(f"--explain and --png are for task models such as the puzzle; '{args.name}' continues text")
    print(model.generate(prompt, args.max_new_tokens, args.temperature, args.top_k, args.seed))
    return 0


def cmd_compare(args) -> int:
    from .compare import compare_variants
    from .sampling import check_sampling_arguments

    from .seeding import check_seed

    check_sampling_arguments(args.max_new_tokens, 1.0, None)
    check_seed(args.seed)
    if args.data is not None and args.dataset is not None:
        raise ZooError("give --data PATH or --dataset NAME, not both")
    override = args.dataset if args.dataset is not None else args.data
    report = compare_variants(args.names, args.windows, args.seed, args.prompt, args.max_new_tokens, override)
    if args.out:
        from .plots import text_panels_png

        panels = [(f"{m['name']}  (validation {m['validation_loss']:.4f})", m["sample"]) for m in report["models"]]
        text_panels_png(panels, f"same prompt, temperature 1, sampling seed {report['seed']}", args.out)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['windows']} windows of {report['context']} tokens per split of {report['dataset']}, seed {report['seed']}; "
          f"losses in {report['unit']}, deltas against {report['baseline']}")
    rows = [[m["name"], f"{m['parameters']:,}", f"{m['train_loss']:.4f}", f"{m['train_delta']:+.4f}",
             f"{m['validation_loss']:.4f}", f"{m['validation_delta']:+.4f}"] for m in report["models"]]
    print(_format_table(["name", "parameters", "train", "Δ train", "validation", "Δ validation"], rows, right={1, 2, 3, 4, 5}))
    print(f"\nsamples: same prompt, temperature 1, sampling seed {report['seed']}")
    for model in report["models"]:
        print(f"\n--- {model['name']} ---\n{model['sample']}")
    return 0


def cmd_experiment(args) -> int:
    from .experiment import StudyConfig, load_study, run_study

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
    out = args.out or Path("runs") / "experiments" / study.name
    report = run_study(study, out, data=args.data, show_progress=not args.quiet)
    print(f"{study.name}: {len(report['runs'])} runs -> {out / 'results.json'}, {out / 'loss.png'}")
    for arm in dict.fromkeys(run["arm"] for run in report["runs"]):
        finals = [run["history"][-1]["validation"] for run in report["runs"] if run["arm"] == arm]
        print(f"  {arm}: validation {sum(finals) / len(finals):.4f} (seeds {min(finals):.4f}–{max(finals):.4f})")
    return 0


def cmd_attention(args) -> int:
    import torch

    from .api import load
    from .plots import attention_grid_png

    model = load(args.name)
    ids = model.encode_prompt(args.prompt)
    if len(ids) > model.card.context_length:
        raise ZooError(f"the prompt is {len(ids)} tokens; '{args.name}' attends over at most {model.card.context_length}")
    with torch.no_grad():
        maps = model.network.attention_maps(torch.tensor([ids]))
    if not maps:
        raise ZooError(f"'{args.name}' ({model.card.architecture}) has no attention to show")
    labels = [model.tokenizer.decode([i]).replace("\n", "\\n") for i in ids]
    if isinstance(maps, dict):  # named heads (the puzzle)
        panels = [[(name, m.squeeze(0).numpy()) for name, m in maps.items()]]
    else:
        panels = [[(f"layer {layer + 1}, head {head + 1}", m[0, head].numpy()) for head in range(m.shape[1])] for layer, m in enumerate(maps)]
    if args.out:
        attention_grid_png(panels, labels, f"{args.name}: {args.prompt!r}", args.out)
        print(f"{sum(len(row) for row in panels)} attention maps over {len(ids)} tokens written to {args.out}")
        return 0
    for row in panels:
        for title, matrix in row:
            print(f"{title}  (rows attend to columns)")
            print(_format_table(["", *labels], [[label, *(f"{v:.2f}" for v in values)] for label, values in zip(labels, matrix)],
                                right=set(range(1, len(labels) + 1))))
            print()
    return 0


def cmd_eval(args) -> int:
    from .api import load
    from .evaluation import evaluate_language_model

    model = load(args.name)
    if hasattr(model.network, "evaluate"):
        report = model.network.evaluate(model.tokenizer)
    else:
        report = evaluate_language_model(model, windows=args.windows, data=args.data)
    if args.json:
        print(json.dumps({"name": model.name, **report}, indent=2))
    else:
        print(f"{model.name}:")
        for key, value in report.items():
            label = key.replace("_", " ")
            if isinstance(value, list):
                print(f"  {label}: {len(value) or 'none'}")
                for item in value:
                    print(f"    {item}")
            else:
                print(f"  {label}: {value:.4f}" if isinstance(value, float) else f"  {label}: {value}")
    return 0


def cmd_train(args) -> int:
    from .seeding import check_seed
    from .trainrun import train_variant

    if args.seed is not None:
        check_seed(args.seed)
    card, registry_file = train_variant(
        args.name, steps=args.steps, seed=args.seed, data=args.data, out_dir=args.out,
        publish=args.publish, show_progress=not args.quiet, resume=args.resume, checkpoint_every=args.checkpoint_every,
        new_name=args.new_name,
    )
    metrics = card.metrics
    if metrics.validation_loss is None:  # a trainer that measures something else (the puzzle's accuracy)
        measured = ", ".join(f"{key} {value}" for key, value in metrics.model_dump(exclude_none=True).items() if key != "loss_unit")
        print(f"{card.name}: {card.recipe.kind}: {measured or 'no metrics'}; sha256 {card.checkpoint.sha256}")
    else:
        print(f"{card.name}: train {metrics.train_loss:.4f}, validation {metrics.validation_loss:.4f} nats/token "
              f"after {card.recipe.steps} steps ({metrics.training_seconds:.0f} s, {metrics.tokens_per_second:,.0f} tokens/s)")
    print(f"  card in {registry_file}")
    if not args.publish:
        print(f"  use it: zoo --registry {registry_file} sample {card.name} --prompt ...  "
              f"(beside a variant of the same name: train with --name NEW)")
    return 0


def cmd_verify(args) -> int:
    from .verify import FAILED, verify_catalogue

    rows = verify_catalogue(args.pattern)
    if not rows:
        raise ZooError(f"no variant matches '{args.pattern}'" if args.pattern else "no variants registered")
    if args.json:
        print(json.dumps([row.as_dict() for row in rows], indent=2))
    else:
        print(_format_table(["name", "plugin", "file", "status", "detail"],
                            [[r.name, r.plugin, r.file, r.status, r.detail] for r in rows]))
    failed = [row for row in rows if row.status == FAILED]
    if failed:
        shown = ", ".join(f"{row.name} ({row.file})" for row in failed[:3]) + (" …" if len(failed) > 3 else "")
        raise ZooError(f"{len(failed)} of {len(rows)} failed verification: {shown}")
    return 0


def cmd_plugins(args) -> int:
    from .api import catalogue
    from .plugin_manager import get_plugins

    plugins = get_plugins()
    try:
        catalogue(plugins)  # reports third-party registry errors against their plugin
    except ZooError as exc:
        print(f"zoo: warning: {exc}", file=sys.stderr)
    conflicts = plugins.conflict_messages()
    if args.json:
        print(json.dumps({
            "plugins": [
                {"name": p.name, "distribution": p.distribution, "version": p.version, "builtin": p.builtin,
                 "registered": p.registered, "errors": p.errors}
                for p in plugins.plugins.values()
            ],
            "conflicts": conflicts,
        }, indent=2))
        return _plugin_problems_status(plugins)
    for info in plugins.plugins.values():
        origin = "built-in" if info.builtin else info.distribution
        print(f"{info.name} {info.version} ({origin})")
        for kind, names in info.registered.items():
            print(f"  {kind}: {', '.join(names)}")
        for error in info.errors:
            print(f"  ERROR: {error}")
    for message in conflicts:
        print(f"CONFLICT: {message}")
    return _plugin_problems_status(plugins)


def _plugin_problems_status(plugins) -> int:
    """Non-zero when any plugin has an error or a conflict: `zoo plugins` can gate a CI."""
    problems = plugins.problems()
    if problems:
        print(f"zoo: error: {len(problems)} plugin problem{'s' * (len(problems) > 1)} (first: {problems[0]})", file=sys.stderr)
        return 1
    return 0


def cmd_new_plugin(args) -> int:
    from .scaffold import write_plugin_skeleton

    directory, files = write_plugin_skeleton(args.name, args.dir)
    print(f"wrote plugin '{args.name}' in {directory}:")
    for path in files:
        print(f"  {path.relative_to(directory)}")
    print(f"next: pip install -e {directory} && zoo plugins")
    return 0


def cmd_datasets(args) -> int:
    from .plugin_manager import get_plugins

    datasets = list(get_plugins().datasets)
    rows = [{"name": d.name, "plugin": d.plugin, "file": str(d.path), "sha256": d.sha256,
             "train_fraction": d.train_fraction, "description": d.description} for d in datasets]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        raise ZooError("no datasets registered")
    print(_format_table(["name", "plugin", "split", "sha256", "file"],
                        [[r["name"], r["plugin"], f"{r['train_fraction']:.0%} train", r["sha256"][:16] + "…", r["file"]] for r in rows]))
    return 0


def cmd_remove(args) -> int:
    from .removal import remove_variant

    deleted = remove_variant(args.name)
    print(f"removed '{args.name}' from your catalogue" + "".join(f"\n  deleted {path}" for path in deleted))
    return 0


def cmd_train_tokenizer(args) -> int:
    from .tokenizer_training import train_tokenizer

    out, summary = train_tokenizer(args.kind, args.data, args.vocab_size, args.train_fraction, args.out, CHECKPOINTS)
    print(f"{summary} -> {out}")
    return 0


def cmd_card_schema(args) -> int:
    from .card_docs import card_schema, cards_markdown

    print(cards_markdown() if args.markdown else json.dumps(card_schema(), indent=2))
    return 0


def cmd_check_plugin(args) -> int:
    from .testing import check_plugin

    results = check_plugin(args.name, deep=not args.quick)
    for result in results:
        print(f"{result.status:<4} {result.subject}: {result.check}" + (f": {result.detail}" if result.detail else ""))
    failed = [r for r in results if not r.passed]
    if failed:
        raise ZooError(f"plugin '{args.name}': {len(failed)} of {len(results)} checks failed (first: {failed[0].subject}: {failed[0].check})")
    skipped = sum(r.status == "skip" for r in results)
    print(f"plugin '{args.name}': {len(results) - skipped} checks passed" + (f", {skipped} skipped (reasons above)" if skipped else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zoo", description="A model zoo of small transformer language models.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.add_argument("--registry", action="append", type=Path, metavar="FILE", default=[],
                        help="also read variants from this registry file (repeatable; added after ZOO_REGISTRY)")
    parser.add_argument("--max-parameters", metavar="N",
                        help="refuse to build a variant estimated above N parameters (default 1,000,000,000; env ZOO_MAX_PARAMETERS)")
    parser.add_argument("--max-memory", metavar="SIZE",
                        help="refuse to build a variant estimated to need more memory for one window, e.g. 32G "
                             "(default 16G; env ZOO_MAX_MEMORY)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = commands.add_parser("list", help="list variants (reads the registry only: fast)")
    p.add_argument("pattern", nargs="?", help="shell wildcard, e.g. 'transformer-*'")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="a Markdown table with train and validation loss")
    p.add_argument("--source", choices=["built-in", "plugin", "user", "extra"],
                   help="only variants of this catalogue layer (default: all)")
    p.set_defaults(run=cmd_list)

    p = commands.add_parser("show", help="show a variant's card")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_show)

    p = commands.add_parser("load", help="build a variant, verify and load its weights")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_load)

    p = commands.add_parser("sample", help="continue a prompt (task models such as the puzzle answer it)")
    p.add_argument("name")
    p.add_argument("--prompt", help="the text to continue; '-' reads it from standard input (at most 16 MiB)")
    p.add_argument("--prompt-file", type=Path, metavar="PATH", help="read the prompt from this UTF-8 file (at most 16 MiB)")
    p.add_argument("--max-new-tokens", type=int, default=100)
    p.add_argument("--seed", type=int, default=0, help="any whole number from -2**63 to 2**64-1 (default 0)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--explain", action="store_true", help="task models: show the residual stream and attention")
    p.add_argument("--png", type=Path, help="task models: write the attention maps to this PNG")
    p.set_defaults(run=cmd_sample)

    p = commands.add_parser("eval", help="measure a variant: validation loss and perplexity (or its task score)")
    p.add_argument("name")
    p.add_argument("--windows", type=int, default=None, help="evaluation windows per split (default: the recipe's)")
    p.add_argument("--data", type=Path, help="evaluate on this text file's validation split")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_eval)

    p = commands.add_parser("train", help="train a variant from its card's recipe")
    p.add_argument("name")
    p.add_argument("--steps", type=int, help="override the recipe's number of updates")
    p.add_argument("--seed", type=int, help="override the recipe's seed")
    p.add_argument("--data", type=Path, help="train on this text file instead of the recipe's corpus")
    p.add_argument("--out", type=Path, help="output folder (default runs/NAME)")
    p.add_argument("--publish", action="store_true",
                   help="add the result to your catalogue ($ZOO_HOME, default ~/.local/share/zoo), or to the last --registry FILE")
    p.add_argument("--name", dest="new_name", metavar="NEW", help="name of the trained variant (default: the variant's own name)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="save the resumable training state every N steps (default: the recipe's eval_every; 0: never)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run from its saved state (same --steps/--seed/--data/--out)")
    p.set_defaults(run=cmd_train)

    p = commands.add_parser("compare", help="score variants on the same windows; deltas and same-seed samples")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("--windows", type=int, default=320, help="windows per split (default 320)")
    p.add_argument("--seed", type=int, default=42, help="chooses the windows and the sampling draws")
    p.add_argument("--prompt", help="default: the start of the training text")
    p.add_argument("--max-new-tokens", type=int, default=100)
    p.add_argument("--data", type=Path, help="score on this text file instead of the recipe's corpus")
    p.add_argument("--dataset", metavar="NAME", help="score on this registered dataset (`zoo datasets`); needed when the variants were trained on different text")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", type=Path, help="also write the samples side by side as a PNG")
    p.set_defaults(run=cmd_compare)

    p = commands.add_parser("experiment", help="paired-seed study: arms trained in lockstep on identical batches")
    p.add_argument("study", nargs="?", help="a study of experiments/studies.toml (depth-1-2, depth-4-6-8, context, positions)")
    p.add_argument("--arms", nargs="+", metavar="VARIANT[@CONTEXT]", help="an ad-hoc study of these variants")
    p.add_argument("--steps", type=int)
    p.add_argument("--seeds", type=int, nargs="+")
    p.add_argument("--milestones", type=int, nargs="+")
    p.add_argument("--eval-every", type=int)
    p.add_argument("--eval-targets", type=int, help="target tokens scored per split (default 1024)")
    p.add_argument("--cross-evaluate", action="store_true", help="also score every arm at every shorter context of the study")
    p.add_argument("--prompt")
    p.add_argument("--data", type=Path)
    p.add_argument("--out", type=Path, help="default runs/experiments/STUDY")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(run=cmd_experiment)

    p = commands.add_parser("attention", help="attention maps per layer and head for a prompt")
    p.add_argument("name")
    p.add_argument("--prompt", required=True)
    p.add_argument("--out", type=Path, help="write a PNG instead of printing the maps")
    p.set_defaults(run=cmd_attention)

    p = commands.add_parser("verify", help="check every checkpoint's sha256, tensors and card; non-zero exit if any fails")
    p.add_argument("pattern", nargs="?", help="shell wildcard, e.g. 'transformer-*'")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_verify)

    p = commands.add_parser("plugins", help="list plugins, what they registered, and load errors")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_plugins)

    p = commands.add_parser("new-plugin", help="write the skeleton of a third-party plugin package")
    p.add_argument("name", help="the plugin's name, e.g. 'cope' (package zoo_cope, distribution zoo-cope)")
    p.add_argument("--dir", type=Path, help="folder to write (default ./zoo-NAME); must be new or empty")
    p.set_defaults(run=cmd_new_plugin)

    p = commands.add_parser("datasets", help="list the registered datasets: name, plugin, split rule, sha256, file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=cmd_datasets)

    p = commands.add_parser("remove", help="delete one of your own variants (card and weights) from your catalogue")
    p.add_argument("name", help="a variant of your catalogue (zoo list --source user)")
    p.set_defaults(run=cmd_remove)

    p = commands.add_parser("train-tokenizer", help="train the BPE vocabulary (or collect the character set)")
    p.add_argument("--kind", default="bpe",
                   help="a registered tokenizer that can be trained: 'bpe', 'char' or a plugin's (default: bpe)")
    p.add_argument("--data", default="tinyshakespeare",
                   help="a registered dataset's name or a text file (default: tinyshakespeare)")
    p.add_argument("--vocab-size", type=int, default=1024, help="BPE only")
    p.add_argument("--train-fraction", type=float, default=0.9, help="BPE only: the share of the text it trains on")
    p.add_argument("--out", type=Path, help="default: checkpoints/bpe-<size>.tiktoken or checkpoints/char-<size>.json")
    p.set_defaults(run=cmd_train_tokenizer)

    p = commands.add_parser("card-schema", help="print the JSON Schema of a variant's card (registry table)")
    p.add_argument("--markdown", action="store_true", help="print the field reference of docs/cards.md instead")
    p.set_defaults(run=cmd_card_schema)

    p = commands.add_parser("check-plugin", help="run the authors' testing kit on everything a plugin registers")
    p.add_argument("name", help="the plugin's name as `zoo plugins` shows it")
    p.add_argument("--quick", action="store_true", help="conformance only: build each component, skip the model checks")
    p.set_defaults(run=cmd_check_plugin)

    for subparser in commands.choices.values():  # `zoo list --registry F` works as well as `zoo --registry F list`
        subparser.add_argument("--registry", action="append", type=Path, metavar="FILE", dest="sub_registry", default=[],
                               help="also read variants from this registry file (repeatable)")
    return parser


def _apply_limits(args) -> dict[str, str | None]:
    """Hand --max-parameters / --max-memory on the way the environment variables
    are (zoo_core.limits reads them); returns what to restore afterwards."""
    import os

    from .limits import parse_size

    before = {}
    for option, variable in (("max_parameters", "ZOO_MAX_PARAMETERS"), ("max_memory", "ZOO_MAX_MEMORY")):
        value = getattr(args, option, None)
        if value is not None:
            parse_size(value, "--" + option.replace("_", "-"))
            before[variable] = os.environ.get(variable)
            os.environ[variable] = value
    return before


def _restore_environment(before: dict[str, str | None]) -> None:
    import os

    for variable, value in before.items():
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = value


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .catalogue_layers import set_command_line_registries

    set_command_line_registries([*args.registry, *args.sub_registry])

    changed: dict[str, str | None] = {}
    try:
        changed = _apply_limits(args)
        return args.run(args)
    except ZooError as exc:
        if args.debug:
            raise
        print(f"zoo: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("zoo: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        # Whatever the OS refuses that no command foresaw (a full disk, no
        # permission, a vanished file) is still one line, never a traceback.
        if args.debug:
            raise
        from .files import describe_os_error

        where = f"{exc.filename}: " if exc.filename else ""
        print(f"zoo: error: {where}{describe_os_error(exc)}", file=sys.stderr)
        return 1
    finally:
        _restore_environment(changed)


if __name__ == "__main__":
    sys.exit(main())
