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

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CHECKPOINTS = PROJECT_ROOT / "checkpoints"


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


def cmd_list(args) -> int:
    from .api import catalogue

    variants = catalogue().match(args.pattern)
    rows = [_summary(v.card) for v in variants]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no variant matches '{args.pattern}'" if args.pattern else "no variants registered", file=sys.stderr)
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
    headers = ["name", "architecture", "layers", "positions", "norm", "context", "parameters", "val loss"]
    table = [
        [r["name"], r["architecture"], r["layers"], r["positions"], r["norm"], r["context"],
         f"{r['parameters']:,}" if r["parameters"] is not None else "-",
         f"{r['validation_loss']:.4f}" if r["validation_loss"] is not None else "-" if r["weights"] else "no weights"]
        for r in rows
    ]
    print(_format_table(headers, table, right={2, 5, 6, 7}))
    return 0


def cmd_show(args) -> int:
    from .api import get_variant
    from .registry import render_registry

    variant = get_variant(args.name)
    if args.json:
        print(json.dumps(variant.card.model_dump(mode="json", exclude_none=True), indent=2))
    else:
        print(f"# from {variant.source} (plugin '{variant.plugin}')")
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

    # Check what the user typed before paying for torch and the checkpoint.
    check_sampling_arguments(args.max_new_tokens, args.temperature, args.top_k)
    if not args.prompt:
        raise ZooError("the prompt is empty; give some text to continue (--prompt TEXT)")
    from .api import load

    model = load(args.name)
    if hasattr(model.network, "ask"):  # task models (the puzzle) answer instead of continuing
        print(model.network.ask(model.tokenizer, args.prompt, explain=args.explain, png=args.png))
        return 0
    if args.explain or args.png:
        raise ZooError(f"--explain and --png are for task models such as the puzzle; '{args.name}' continues text")
    print(model.generate(args.prompt, args.max_new_tokens, args.temperature, args.top_k, args.seed))
    return 0


def cmd_compare(args) -> int:
    from .compare import compare_variants
    from .sampling import check_sampling_arguments

    check_sampling_arguments(args.max_new_tokens, 1.0, None)
    report = compare_variants(args.names, args.windows, args.seed, args.prompt, args.max_new_tokens, args.data)
    if args.out:
        from .plots import text_panels_png

        panels = [(f"{m['name']}  (validation {m['validation_loss']:.4f})", m["sample"]) for m in report["models"]]
        text_panels_png(panels, f"same prompt, temperature 1, sampling seed {report['seed']}", args.out)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['windows']} windows of {report['context']} tokens per split, seed {report['seed']}; "
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


def cmd_gallery(args) -> int:
    from .web.gallery import write_gallery

    report = write_gallery(args.out, pattern=args.variants, cache=args.cache, quiet=args.quiet)
    print(f"{report['variants']} variants, {report['studies']} studies -> {args.out / 'index.html'} "
          f"({report['seconds']:.1f} s, {report['cached']} from cache)")
    return 0


def cmd_serve(args) -> int:
    from .web.server import Limits, serve

    if args.max_tokens_limit < 1 or args.max_concurrent < 1:
        raise ZooError("--max-tokens-limit and --max-concurrent must be at least 1")
    limits = Limits(max_tokens=args.max_tokens_limit, max_concurrent_generations=args.max_concurrent)
    site = args.site
    if site is None and not args.no_gallery:
        from .web.gallery import default_cache_folder, write_gallery

        # Measurements are cached per checkpoint: only the first start pays for them.
        site = default_cache_folder().parent / "site"
        print(f"zoo serve: writing the gallery to {site} ...", file=sys.stderr, flush=True)
        write_gallery(site, quiet=True)
    serve(args.host, args.port, site, limits)
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
    from .trainrun import train_variant

    card, registry_file = train_variant(
        args.name, steps=args.steps, seed=args.seed, data=args.data, out_dir=args.out,
        publish=args.publish, show_progress=not args.quiet, resume=args.resume, checkpoint_every=args.checkpoint_every,
    )
    metrics = card.metrics
    print(f"{card.name}: train {metrics.train_loss:.4f}, validation {metrics.validation_loss:.4f} nats/token "
          f"after {card.recipe.steps} steps ({metrics.training_seconds:.0f} s, {metrics.tokens_per_second:,.0f} tokens/s)")
    print(f"  card in {registry_file}")
    if not args.publish:
        print(f"  use it: ZOO_REGISTRY={registry_file} zoo sample {card.name} --prompt ...")
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
        return 0
    for info in plugins.plugins.values():
        origin = "built-in" if info.builtin else info.distribution
        print(f"{info.name} {info.version} ({origin})")
        for kind, names in info.registered.items():
            print(f"  {kind}: {', '.join(names)}")
        for error in info.errors:
            print(f"  ERROR: {error}")
    for message in conflicts:
        print(f"CONFLICT: {message}")
    return 0


def cmd_new_plugin(args) -> int:
    from .scaffold import write_plugin_skeleton

    directory, files = write_plugin_skeleton(args.name, args.dir)
    print(f"wrote plugin '{args.name}' in {directory}:")
    for path in files:
        print(f"  {path.relative_to(directory)}")
    print(f"next: pip install -e {directory} && zoo plugins")
    return 0


def cmd_train_tokenizer(args) -> int:
    from .data import read_corpus_text, split_text
    from .files import atomic_write

    text = read_corpus_text(args.data)
    if args.kind == "char":
        from plugins.chars.tokenizer import CharTokenizer

        # Seed 004's vocabulary: every character of the whole corpus, so that
        # validation text never holds an unknown one.
        tokenizer = CharTokenizer.from_text(text)
        out = args.out or CHECKPOINTS / f"char-{tokenizer.vocab_size}.json"
        atomic_write(out, tokenizer.save)
        print(f"{tokenizer.vocab_size} characters from {len(text):,} characters -> {out}")
        return 0
    from plugins.bpe.tokenizer import write_ranks
    from plugins.bpe.training import train_bpe

    train_text, _ = split_text(text, args.train_fraction)  # BPE never sees validation text
    ranks = train_bpe(train_text, args.vocab_size)
    out = args.out or CHECKPOINTS / f"bpe-{args.vocab_size}.tiktoken"
    atomic_write(out, lambda temporary: write_ranks(ranks, temporary))
    print(f"{len(ranks)} tokens trained on {len(train_text):,} characters -> {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zoo", description="A model zoo of small transformer language models.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = commands.add_parser("list", help="list variants (reads the registry only: fast)")
    p.add_argument("pattern", nargs="?", help="shell wildcard, e.g. 'transformer-*'")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="a Markdown table with train and validation loss")
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
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
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
    p.add_argument("--publish", action="store_true", help="replace the variant's own checkpoint and card")
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

    p = commands.add_parser("gallery", help="write a static site of every variant and study (opens from file://)")
    p.add_argument("--out", type=Path, default=Path("site"), help="output folder (default: %(default)s)")
    p.add_argument("--variants", metavar="PATTERN", help="only variants matching this shell wildcard (default: all)")
    p.add_argument("--cache", type=Path, help="where per-variant samples and maps are cached (default: the user cache folder)")
    p.add_argument("--quiet", action="store_true", help="no per-variant progress lines")
    p.set_defaults(run=cmd_gallery)

    p = commands.add_parser("serve", help="serve the gallery, a sampling page and an OpenAI-style completions API")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    p.add_argument("--site", type=Path,
                   help="a folder written by `zoo gallery` to serve at / (default: write the gallery into the user cache folder)")
    p.add_argument("--no-gallery", action="store_true", help="serve only the sampling page and the API (/ goes to /sample)")
    p.add_argument("--max-tokens-limit", type=int, default=1024, metavar="N",
                   help="largest max_tokens a request may ask for (default: %(default)s)")
    p.add_argument("--max-concurrent", type=int, default=4, metavar="N",
                   help="generations at once; more get HTTP 429 (default: %(default)s)")
    p.set_defaults(run=cmd_serve)

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

    p = commands.add_parser("train-tokenizer", help="train the BPE vocabulary (or collect the character set)")
    p.add_argument("--kind", choices=["bpe", "char"], default="bpe")
    p.add_argument("--data", type=Path, default=PROJECT_ROOT / "data" / "tinyshakespeare.txt")
    p.add_argument("--vocab-size", type=int, default=1024, help="BPE only")
    p.add_argument("--train-fraction", type=float, default=0.9, help="BPE only: the share of the text it trains on")
    p.add_argument("--out", type=Path, help="default: checkpoints/bpe-<size>.tiktoken or checkpoints/char-<size>.json")
    p.set_defaults(run=cmd_train_tokenizer)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
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


if __name__ == "__main__":
    sys.exit(main())
