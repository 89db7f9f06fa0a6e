"""The `zoo` command.

Errors a user can cause end in one line on stderr and exit status 1 (2 for bad
usage); `--debug` shows the traceback instead. Heavy imports (torch) happen inside
the commands that need them, so `zoo list` stays fast.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

from .clihelp import DefaultsHelpFormatter, finish_help, unknown_command_message
from .errors import ZooError

CHECKPOINTS = Path("checkpoints")  # train-tokenizer writes here, in the working folder


def _format_table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    from .tables import render_table

    return render_table(headers, rows, right)


def _summary(card) -> dict:
    """The facts `zoo list` shows, from the card alone (``Variant.facts``: no pydantic)."""
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
    from .api import catalogue
    from .finding import VariantFilter, find_variants

    found = catalogue()
    _warn_catalogue_problems(found)
    criteria = VariantFilter(args.pattern, args.tag or [], args.architecture, args.tokenizer, args.dataset)
    variants = [v for v in find_variants(found, criteria, args.sort) if args.source is None or v.layer == args.source]
    where = f" in the {args.source} catalogue" if args.source else ""
    return _print_variants(args, variants, "no variant matches" + _described(args) + where)


def _described(args) -> str:
    given = [f"'{args.pattern}'"] if args.pattern else []
    given += [f"--{key.replace('_', '-')} {value}" for key in ("tag", "architecture", "tokenizer", "dataset")
              for value in ((getattr(args, key) or []) if key == "tag" else [getattr(args, key)]) if value]
    return " " + " ".join(given) if given else " (no variants registered)"


def cmd_search(args) -> int:
    from .api import catalogue
    from .finding import search_variants

    text = " ".join(args.text)
    return _print_variants(args, search_variants(catalogue(), text), f"no variant's name, description or tags hold '{text}'")


def _print_variants(args, variants, nothing: str) -> int:
    from .api import unbuildable_reason

    rows = [{**_summary(v.facts), "source": v.layer, "unbuildable": unbuildable_reason(v)} for v in variants]
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k not in ("train_loss", "accuracy")} for r in rows], indent=2))
        return 0
    if not rows:
        print(nothing, file=sys.stderr)
        return 1
    if getattr(args, "markdown", False):
        print("| name | architecture | layers | positions | norm | context | parameters | train loss | val loss | val bits/byte |")
        print("|---|---|---:|---|---|---:|---:|---:|---:|---:|")
        for variant, r in zip(variants, rows):
            metrics = variant.facts.metrics
            cells = [f"`{r['name']}`", r["architecture"], r["layers"], r["positions"], r["norm"], r["context"],
                     f"{r['parameters']:,}" if r["parameters"] is not None else "—",
                     *(f"{v:.4f}" if v is not None else "—" for v in (metrics.train_loss, metrics.validation_loss))]
            if metrics.accuracy is not None:  # task models are scored by accuracy, not loss
                cells[-1] = f"accuracy {metrics.accuracy:.0%}"
            bpb = metrics.validation_bits_per_byte
            cells.append(f"{bpb:.4f}" if bpb is not None else "—")
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

    # torch is imported first and timed apart: it costs the same for every
    # variant, and "loaded in" should say what loading this variant costs.
    started = time.perf_counter()
    import torch  # noqa: F401

    torch_seconds = time.perf_counter() - started
    started = time.perf_counter()
    model = load(args.name)
    total = time.perf_counter() - started
    verification = model.verification
    summary = {
        "name": model.name,
        "architecture": model.facts.architecture,
        "parameters": model.parameters(),
        "checkpoint": str(verification.path),
        "sha256": verification.sha256,
        "tensors": verification.tensors,
        "verified": verification.checks,
        "weights_seconds": round(verification.seconds, 4),
        "load_seconds": round(total, 4),
        "torch_import_seconds": round(torch_seconds, 4),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{model.name}: {model.facts.architecture}, {summary['parameters']:,} parameters, {verification.tensors} tensors")
        print(f"  checkpoint {verification.path}")
        print(f"  verified   {', '.join(verification.checks)} (sha256 {verification.sha256[:16]}…)")
        print(f"  loaded in  {total * 1000:.0f} ms (weights {verification.seconds * 1000:.1f} ms; "
              f"importing torch took {torch_seconds * 1000:.0f} ms more)")
    return 0


# Options of `zoo sample` that only language models use; task models (the
# puzzle) answer the prompt instead and say which of these were ignored.
_CONTINUATION_OPTIONS = ("max_new_tokens", "seed", "temperature", "greedy", "top_k", "top_p", "num_samples", "stop", "stream")


def _unescape(text: str) -> str:
    r"""``\n`` and ``\t`` typed in a shell argument mean a newline and a tab (``\\``: a backslash)."""
    import re

    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], text)


def _load_on_threads(args):
    """``args.name`` loaded for `zoo sample` and `zoo eval` (``--device``,
    ``--dtype``), torch's threads set from ``--threads`` or the model's size
    before loading, since loading is torch work too."""
    from .api import get_variant, load_variant

    from .threads import check_threads, use_threads, use_threads_before_loading

    check_threads(args.threads)  # before paying for the catalogue and the checkpoint
    variant = get_variant(args.name)
    use_threads_before_loading(variant.facts.parameters, args.threads)
    model = load_variant(variant, device=args.device, dtype=args.dtype)
    use_threads(model.network, args.threads)
    return model


def cmd_sample(args) -> int:
    from .sampling import check_sampling_arguments

    from .prompts import read_prompt
    from .seeding import check_seed

    if args.greedy:
        args.temperature = 0.0
    # Check what the user typed before paying for torch and the checkpoint.
    check_sampling_arguments(args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.num_samples, flags=True)
    check_seed(args.seed)
    prompt = read_prompt(args.prompt, args.prompt_file)
    if not prompt:
        raise ZooError("the prompt is empty; give some text to continue (--prompt TEXT)")
    model = _load_on_threads(args)
    if hasattr(model.network, "ask"):  # task models (the puzzle) answer instead of continuing
        ignored = [option for option in _CONTINUATION_OPTIONS if getattr(args, option) != args.option_defaults[option]]
        if ignored:
            flags = ", ".join("--" + option.replace("_", "-") for option in ignored)
            print(f"zoo: note: '{args.name}' answers the prompt rather than continuing it; {flags} "
                  f"{'does' if len(ignored) == 1 else 'do'} not apply", file=sys.stderr)
        answer = model.network.ask(model.tokenizer, prompt, explain=args.explain, png=args.png)
        print(json.dumps({"name": model.name, "prompt": prompt, "answer": answer}, indent=2) if args.json else answer)
        return 0
    if args.explain or args.png:
        raise ZooError(f"--explain and --png are for task models such as the puzzle; '{args.name}' continues text")
    settings = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                    top_p=args.top_p, stop=[_unescape(stop) for stop in args.stop or []])
    stream = args.stream if args.stream is not None else (sys.stdout.isatty() and not args.json and args.num_samples == 1)
    if stream and (args.json or args.num_samples > 1):
        raise ZooError("--stream shows one sample as plain text; drop --json and --num-samples, or --stream")
    if stream:
        # What is printed stays printed: Ctrl-C ends the sample (exit 130) but
        # keeps the text so far on the terminal.
        print(prompt, end="", flush=True)
        try:
            for piece in model.stream(prompt, seed=args.seed, **settings):
                print(piece, end="", flush=True)
        finally:
            print(flush=True)
        return 0
    samples = model.sample(prompt, seed=args.seed, num_samples=args.num_samples, **settings)
    if args.json:
        print(json.dumps({"name": model.name, "settings": {**settings, "seed": args.seed, "num_samples": args.num_samples},
                          "samples": [sample.as_dict() for sample in samples]}, indent=2))
    elif len(samples) == 1:
        print(samples[0].prompt + samples[0].text)
    else:
        for number, sample in enumerate(samples, 1):
            print(f"--- sample {number} of {len(samples)} (seed {sample.seed}) ---\n{sample.prompt + sample.text}")
    return 0


def cmd_compare(args) -> int:
    from .compare import compare_variants
    from .sampling import check_sampling_arguments

    from .seeding import check_seed

    check_sampling_arguments(args.max_new_tokens, flags=True)
    if args.windows < 1:  # checked here to name the flag; the API names its argument
        raise ZooError(f"--windows must be at least 1, not {args.windows}")
    check_seed(args.seed)
    if args.data is not None and args.dataset is not None:
        raise ZooError("give --data PATH or --dataset NAME, not both")
    override = args.dataset if args.dataset is not None else args.data
    report = compare_variants(args.names, args.windows, args.seed, args.prompt, args.max_new_tokens, override,
                              device=args.device, dtype=args.dtype, bits_per_byte=args.bits_per_byte, text_chars=args.text_chars)
    in_bits = report["unit"] == "bits per byte"
    if args.out:
        from .plots import text_panels_png

        score = "bits_per_byte" if in_bits else "validation_loss"
        panels = [(f"{m['name']}  ({score.replace('_', ' ')} {m[score]:.4f})", m["sample"]) for m in report["models"]]
        text_panels_png(panels, f"same prompt, temperature 1, sampling seed {report['seed']}", args.out)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    if in_bits:
        print(f"{report['reason']}.\nscored text: {report['text']}, identical for every model")
        print(f"method: {report['method']}")
        rows = [[m["name"], m["tokenizer"], f"{m['parameters']:,}", f"{m['tokens']:,}", f"{m['nats_per_token']:.4f}",
                 f"{m['bits_per_character']:.4f}", f"{m['bits_per_byte']:.4f}", f"{m['bits_per_byte_delta']:+.4f}"]
                for m in report["models"]]
        print(_format_table(["name", "tokenizer", "parameters", "tokens", "nats/token", "bits/char", "bits/byte", "Δ bits/byte"],
                            rows, right={2, 3, 4, 5, 6, 7}))
        print(f"\nsamples: same prompt, temperature 1, sampling seed {report['seed']}")
        for model in report["models"]:
            print(f"\n--- {model['name']} ---\n{model['sample']}")
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
    from .experiment import StudyConfig, curve_eval_every, load_study, run_study

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
    if args.eval_every is None:  # enough points for a curve whatever --steps is
        study.eval_every = curve_eval_every(study.steps, study.eval_every)
    out = args.out or Path("runs") / "experiments" / study.name
    report = run_study(study, out, data=args.data, show_progress=not args.quiet, device=args.device, dtype=args.dtype, jobs=args.jobs)
    print(f"{study.name}: {len(report['runs'])} runs -> {out / 'results.json'}, {out / 'loss.png'}")
    for arm in dict.fromkeys(run["arm"] for run in report["runs"]):
        finals = [run["history"][-1]["validation"] for run in report["runs"] if run["arm"] == arm]
        print(f"  {arm}: validation {sum(finals) / len(finals):.4f} (seeds {min(finals):.4f}–{max(finals):.4f})")
    return 0


def cmd_attention(args) -> int:
    import torch

    from .api import load
    from .plots import attention_grid_png

    model = load(args.name, device=args.device, dtype=args.dtype)
    ids = model.encode_prompt(args.prompt)
    if len(ids) > model.card.context_length:
        raise ZooError(f"the prompt is {len(ids)} tokens; '{args.name}' attends over at most {model.card.context_length}")
    with torch.no_grad():
        maps = model.network.attention_maps(torch.tensor([ids], device=model.device))
    if not maps:
        raise ZooError(f"'{args.name}' ({model.card.architecture}) has no attention to show")
    labels = [model.tokenizer.decode([i]).replace("\n", "\\n") for i in ids]
    if isinstance(maps, dict):  # named heads (the puzzle)
        panels = [[(name, m.squeeze(0).float().cpu().numpy()) for name, m in maps.items()]]
    else:
        panels = [[(f"layer {layer + 1}, head {head + 1}", m[0, head].float().cpu().numpy()) for head in range(m.shape[1])]
                  for layer, m in enumerate(maps)]
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
    from .evaluation import evaluate_language_model

    model = _load_on_threads(args)
    if hasattr(model.network, "evaluate"):
        report = model.network.evaluate(model.tokenizer)
    else:
        report = evaluate_language_model(model, windows=args.windows, data=args.data, text_chars=args.text_chars)
        if args.record:
            from .evaluation import record_bits_per_byte

            if args.data is not None or args.text_chars is not None:
                raise ZooError("--record writes the card's own measurement: drop --data and --text-chars")
            print(f"recorded bits per byte in {record_bits_per_byte(model, report)}", file=sys.stderr)
    if args.json:
        print(json.dumps({"name": model.name, **report}, indent=2))
    else:
        print(f"{model.name}:")
        for key, value in report.items():
            label = key.replace("_", " ")
            if key.endswith("_total") and isinstance(report.get(key.removesuffix("_total")), list):
                continue  # printed with its list
            if isinstance(value, list):
                # A capped list says how many there are in all, not how many it shows.
                count = report.get(f"{key}_total", len(value))
                capped = f" (first {len(value)} shown)" if count > len(value) else ""
                print(f"  {label}: {count or 'none'}{capped}")
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
    if args.checkpoint_every is not None and args.checkpoint_every < 0:  # named as the flag; the API names its argument
        raise ZooError(f"--checkpoint-every must be a number of steps (0: never), not {args.checkpoint_every}")
    if args.nproc_per_node is not None or args.nnodes is not None:
        return _launch_data_parallel(args)
    card, registry_file = train_variant(
        args.name, steps=args.steps, seed=args.seed, data=args.data, out_dir=args.out,
        publish=args.publish, show_progress=not args.quiet, resume=args.resume, checkpoint_every=args.checkpoint_every,
        new_name=args.new_name, log_every=args.log_every, resume_command=_resume_command(args.argv),
        interim_eval_windows=args.interim_eval_windows, compile=args.compile, device=args.device, dtype=args.dtype,
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


def _resume_command(argv: list[str]) -> str:
    """The command line that continues this run: the same one, with --resume."""
    import shlex

    return shlex.join(["zoo", *argv, *([] if "--resume" in argv else ["--resume"])])


def _launch_data_parallel(args) -> int:
    """`zoo train --nproc-per-node N`: the same run on N processes (per machine) through torchrun."""
    from .distributed import launch
    from .trainrun import check_data_parallel_run

    nproc, nnodes = (1 if value is None else value for value in (args.nproc_per_node, args.nnodes))
    if nproc < 1 or nnodes < 1:
        raise ZooError("--nproc-per-node and --nnodes must be at least 1")
    state_path = check_data_parallel_run(args.name, nproc * nnodes, out_dir=args.out, publish=args.publish, resume=args.resume,
                                         new_name=args.new_name)
    worker = [args.name, "--device", args.device, "--dtype", args.dtype]
    for option, value in (("--steps", args.steps), ("--seed", args.seed), ("--data", args.data), ("--out", args.out),
                          ("--checkpoint-every", args.checkpoint_every), ("--name", args.new_name),
                          ("--interim-eval-windows", args.interim_eval_windows), ("--log-every", args.log_every),
                          *(("--registry", registry) for registry in [*args.registry, *args.sub_registry])):
        if value is not None:
            worker += [option, str(value)]
    worker += [flag for flag, on in (("--publish", args.publish), ("--quiet", args.quiet), ("--resume", args.resume),
                                     ("--compile", args.compile), ("--debug", args.debug)) if on]
    return launch(worker, nproc_per_node=nproc, nnodes=nnodes, node_rank=args.node_rank,
                  rdzv_endpoint=args.rdzv_endpoint, state_path=state_path, debug=args.debug)


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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zoo")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _device_options(parser: argparse.ArgumentParser, what: str, training: bool = False) -> None:
    from .devices import DEVICE_CHOICES, DTYPE_CHOICES, device_argument

    parser.add_argument("--device", type=device_argument, default="auto", metavar="DEVICE",
                        help=f"where to {what}: {DEVICE_CHOICES}; auto picks CUDA, then MPS, then the CPU (default: auto)")
    how = ("the forward pass runs under autocast in it, weights stay float32; float16 adds a gradient scaler" if training
           else "the network's weights are cast to it")
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="float32",
                        help=f"floating-point type to {what} in: {how} (default: float32)")


def cmd_import(args) -> int:
    if args.source == "nanogpt":
        from .interop.nanogpt import import_nanogpt

        card, registry = import_nanogpt(args.path, args.name, args.tokenizer, args.license)
    else:
        from .interop.hf import import_hf

        card, registry = import_hf(args.path, args.name, args.tokenizer, args.license)
    print(f"{card.name}: {card.parameters:,} parameters from {args.path} -> {registry.parent / card.checkpoint.path}")
    print(f"  card in {registry} (the user catalogue); try: zoo eval {card.name}")
    return 0


def cmd_export(args) -> int:
    from .api import load

    model = load(args.name)
    if args.format == "hf":
        from .interop.hf import export_hf

        written, checks = export_hf(model, args.out)
    else:
        from .interop.onnx import export_onnx

        written, checks = export_onnx(model, args.out)
    print(f"{model.name} -> {args.out} ({args.format}): {', '.join(sorted(p.name for p in written))}")
    print(f"  checked: logits on the first {checks['logit_tokens']} validation tokens within "
          f"{checks['max_logit_difference']:.1e} of the zoo's"
          + (f"; tokenizer ids identical on all {checks['tokenizer_ids_checked']:,} validation tokens"
             if "tokenizer_ids_checked" in checks else ""))
    return 0


def _list_arguments(commands) -> None:
    p = commands.add_parser("list", help="list variants (reads the registry only: fast)")
    p.add_argument("pattern", nargs="?", help="part of the name ('rope') or a shell wildcard ('transformer-*') (default: all)")
    p.add_argument("--tag", action="append", help="only variants with this tag; may be repeated (default: any)")
    p.add_argument("--architecture", help="only this architecture, e.g. 'gpt' (default: any)")
    p.add_argument("--tokenizer", help="only this tokenizer kind, e.g. 'bpe' or 'char' (default: any)")
    p.add_argument("--dataset", help="only variants trained on this data: the recipe's file, its name or stem (default: any)")
    p.add_argument("--sort", choices=["validation_loss", "parameters", "name"], help="order of the rows (default: catalogue order)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--markdown", action="store_true", help="a Markdown table with train and validation loss")
    p.add_argument("--source", choices=["built-in", "plugin", "user", "extra"],
                   help="only variants of this catalogue layer (default: all)")
    p.set_defaults(run=cmd_list)


def _search_arguments(commands) -> None:
    p = commands.add_parser("search", help="find variants whose name, description or tags hold every word")
    p.add_argument("text", nargs="+", help="words to look for, e.g. 'rope' or 'no positions'")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run=cmd_search)


def _show_arguments(commands) -> None:
    p = commands.add_parser("show", help="show a variant's card")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--json", action="store_true", help="print the card as JSON instead of TOML")
    p.set_defaults(run=cmd_show)


def _load_arguments(commands) -> None:
    p = commands.add_parser("load", help="build a variant, verify and load its weights")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=cmd_load)


def _sample_arguments(commands) -> None:
    p = commands.add_parser("sample", help="continue a prompt (task models such as the puzzle answer it)",
                            description="Continue a prompt with a language model, or ask a task model (the puzzle) a question. "
                                        "Sample i of --num-samples N is drawn with seed SEED+i: `--seed SEED+i` alone gives it again.")
    p.add_argument("name", help="the variant to sample (see `zoo list`)")
    p.add_argument("--prompt", help="the text to continue (the puzzle: the sentence to answer); '-' reads it from standard input (at most 16 MiB)")
    p.add_argument("--prompt-file", type=Path, metavar="PATH", help="read the prompt from this UTF-8 file (at most 16 MiB)")
    p.add_argument("--max-new-tokens", type=int, default=100, help="how many tokens to draw at most")
    p.add_argument("--seed", type=int, default=0, help="seed of the (first) sample's draws: any whole number from -2**63 to 2**64-1")
    p.add_argument("--temperature", type=float, default=1.0, help="divides the logits; 0 is greedy decoding")
    p.add_argument("--greedy", action="store_true", help="always take the most likely token (same as --temperature 0)")
    p.add_argument("--top-k", type=int, default=None, help="draw only among the K most likely tokens (default: all)")
    p.add_argument("--top-p", type=float, default=None, help="draw only among the most likely tokens that together reach probability P (default: all)")
    p.add_argument("--num-samples", type=int, default=1, help="how many samples to draw, as one batch")
    p.add_argument("--stop", action="append", metavar="STRING", help=r"end the sample before this text (\n is a newline, \t a tab); may be repeated (default: none)")
    p.add_argument("--stream", action=argparse.BooleanOptionalAction, default=None,
                   help="print tokens as they are drawn (default: on a terminal, for one sample without --json)")
    p.add_argument("--json", action="store_true", help="print the prompt, tokens, text and settings as JSON")
    p.add_argument("--explain", action="store_true", help="task models: show the residual stream and attention")
    p.add_argument("--png", type=Path, help="task models: write the attention maps to this PNG (default: none)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads (default: 1 for models under 5M parameters, else torch's default)")
    _device_options(p, "sample")
    p.set_defaults(run=cmd_sample, option_defaults={option: p.get_default(option) for option in _CONTINUATION_OPTIONS})


def _eval_arguments(commands) -> None:
    p = commands.add_parser("eval", help="measure a variant: validation loss and perplexity (or its task score)")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--windows", type=int, default=None, help="evaluation windows per split (default: the recipe's)")
    p.add_argument("--data", type=Path, help="evaluate on this text file's validation split (default: the recipe's corpus)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads (default: 1 for models under 5M parameters, else torch's default)")
    _device_options(p, "evaluate")
    p.add_argument("--text-chars", type=int, default=None, metavar="N",
                   help="bits per byte on the first N characters of the validation split (default: all of it)")
    p.add_argument("--record", action="store_true",
                   help="write validation bits per byte and per character into the variant's card (its registry file)")
    p.set_defaults(run=cmd_eval)


def _train_arguments(commands) -> None:
    p = commands.add_parser("train", help="train a variant from its card's recipe")
    p.add_argument("name", help="the variant to train (see `zoo list`)")
    p.add_argument("--steps", type=int, help="number of updates (default: the recipe's)")
    p.add_argument("--seed", type=int, help="seed of weights, batches and dropout (default: the recipe's)")
    p.add_argument("--data", type=Path, help="train on this text file (default: the recipe's corpus)")
    p.add_argument("--out", type=Path, help="output folder (default runs/NAME)")
    p.add_argument("--publish", action="store_true",
                   help="add the result to your catalogue ($ZOO_HOME, default ~/.local/share/zoo), or to the last --registry FILE")
    p.add_argument("--name", dest="new_name", metavar="NEW", help="name of the trained variant (default: the variant's own name)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--log-every", type=int, metavar="N",
                   help="when not on a terminal, print a progress line every N steps (default: about 20 lines per run)")
    p.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="save the resumable training state every N steps (default: the recipe's eval_every; 0: never)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run from its saved state (same --steps/--seed/--data/--out)")
    p.add_argument("--interim-eval-windows", type=int, metavar="N",
                   help="windows per split for the evaluations before the last (default: a quarter of the recipe's "
                        "eval_windows, at least 64); the final evaluation always uses all of them")
    p.add_argument("--compile", action="store_true",
                   help="run forward and backward through torch.compile (needs a C compiler on CPU; same weights and card)")
    _device_options(p, "train", training=True)
    p.add_argument("--nproc-per-node", type=int, metavar="N",
                   help="data-parallel: train on N processes on this machine through torchrun (Gloo on CPUs, one GPU each with NCCL)")
    p.add_argument("--nnodes", type=int, metavar="M", help="data-parallel: the number of machines taking part (default 1)")
    p.add_argument("--node-rank", type=int, metavar="R", help="data-parallel: this machine's number, 0 to M-1 (0 is the one that writes)")
    p.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="data-parallel: where machine 0 listens for the others")
    p.set_defaults(run=cmd_train)


def _compare_arguments(commands) -> None:
    p = commands.add_parser("compare", help="score variants on the same windows; deltas and same-seed samples")
    p.add_argument("names", nargs="+", metavar="NAME", help="the variants to compare; the first is the baseline")
    p.add_argument("--windows", type=int, default=320, help="windows per split")
    p.add_argument("--seed", type=int, default=42, help="chooses the windows and the sampling draws")
    p.add_argument("--prompt", help="the samples' prompt (default: the start of the training text)")
    p.add_argument("--max-new-tokens", type=int, default=100, help="tokens drawn per sample")
    p.add_argument("--data", type=Path, help="score on this text file (default: the recipe's corpus)")
    p.add_argument("--dataset", metavar="NAME", help="score on this registered dataset (`zoo datasets`); needed when the variants were trained on different text")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--out", type=Path, help="also write the samples side by side as a PNG (default: none)")
    _device_options(p, "score and sample")
    p.add_argument("--bits-per-byte", action="store_true",
                   help="score in bits per byte on the validation text (automatic when the tokenizers differ)")
    p.add_argument("--text-chars", type=int, default=None, metavar="N",
                   help="bits per byte: score the first N characters of the validation split (default: all of it)")
    p.set_defaults(run=cmd_compare)


def _experiment_arguments(commands) -> None:
    p = commands.add_parser("experiment", help="paired-seed study: arms trained in lockstep on identical batches")
    p.add_argument("study", nargs="?", help="a study of experiments/studies.toml (depth-1-2, depth-4-6-8, context, positions)")
    p.add_argument("--arms", nargs="+", metavar="VARIANT[@CONTEXT]", help="an ad-hoc study of these variants (default: none)")
    p.add_argument("--steps", type=int, help="updates per arm (default: the study's)")
    p.add_argument("--seeds", type=int, nargs="+", help="paired seeds, each running every arm (default: the study's)")
    p.add_argument("--milestones", type=int, nargs="+", help="steps at which each arm is checkpointed (default: the study's)")
    p.add_argument("--eval-every", type=int, help="steps between evaluations (default: the study's)")
    p.add_argument("--eval-targets", type=int, help="target tokens scored per split (default: the study's, 1024)")
    p.add_argument("--cross-evaluate", action="store_true", help="also score every arm at every shorter context of the study")
    p.add_argument("--prompt", help="prompt of the same-seed samples (default: the study's)")
    p.add_argument("--data", type=Path, help="train and score on this text file (default: the recipe's corpus)")
    p.add_argument("--out", type=Path, help="output folder (default: runs/experiments/STUDY)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    _device_options(p, "train", training=True)
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run up to N seeds at once, each in its own process (results identical to --jobs 1; default 1)")
    p.set_defaults(run=cmd_experiment)


def _attention_arguments(commands) -> None:
    p = commands.add_parser("attention", help="attention maps per layer and head for a prompt")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--prompt", required=True, help="the text whose attention to show")
    p.add_argument("--out", type=Path, help="write a PNG instead of printing the maps (default: print)")
    _device_options(p, "compute the maps")
    p.set_defaults(run=cmd_attention)


def _gallery_arguments(commands) -> None:
    p = commands.add_parser("gallery", help="write a static site of every variant and study (opens from file://)")
    p.add_argument("--out", type=Path, default=Path("site"), help="output folder (default: %(default)s)")
    p.add_argument("--variants", metavar="PATTERN", help="only variants matching this shell wildcard (default: all)")
    p.add_argument("--cache", type=Path, help="where per-variant samples and maps are cached (default: the user cache folder)")
    p.add_argument("--quiet", action="store_true", help="no per-variant progress lines")
    p.set_defaults(run=cmd_gallery)


def _serve_arguments(commands) -> None:
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


def _verify_arguments(commands) -> None:
    p = commands.add_parser("verify", help="check every checkpoint's sha256, tensors and card; non-zero exit if any fails")
    p.add_argument("pattern", nargs="?", help="shell wildcard, e.g. 'transformer-*' (default: every variant)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run=cmd_verify)


def _plugins_arguments(commands) -> None:
    p = commands.add_parser("plugins", help="list plugins, what they registered, and load errors")
    p.add_argument("--json", action="store_true", help="print the plugins and conflicts as JSON")
    p.set_defaults(run=cmd_plugins)


def _new_plugin_arguments(commands) -> None:
    p = commands.add_parser("new-plugin", help="write the skeleton of a third-party plugin package")
    p.add_argument("name", help="the plugin's name, e.g. 'cope' (package zoo_cope, distribution zoo-cope)")
    p.add_argument("--dir", type=Path, help="folder to write (default ./zoo-NAME); must be new or empty")
    p.set_defaults(run=cmd_new_plugin)


def _datasets_arguments(commands) -> None:
    p = commands.add_parser("datasets", help="list the registered datasets: name, plugin, split rule, sha256, file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=cmd_datasets)


def _remove_arguments(commands) -> None:
    p = commands.add_parser("remove", help="delete one of your own variants (card and weights) from your catalogue")
    p.add_argument("name", help="a variant of your catalogue (zoo list --source user)")
    p.set_defaults(run=cmd_remove)


def _train_tokenizer_arguments(commands) -> None:
    p = commands.add_parser("train-tokenizer", help="train the BPE vocabulary (or collect the character set)")
    p.add_argument("--kind", default="bpe",
                   help="a registered tokenizer that can be trained: 'bpe', 'char' or a plugin's (default: bpe)")
    p.add_argument("--data", default="tinyshakespeare",
                   help="a registered dataset's name or a text file (default: tinyshakespeare)")
    p.add_argument("--vocab-size", type=int, default=1024, help="BPE only: tokens in the vocabulary")
    p.add_argument("--train-fraction", type=float, default=0.9, help="BPE only: the share of the text it trains on")
    p.add_argument("--out", type=Path, help="default: checkpoints/bpe-<size>.tiktoken or checkpoints/char-<size>.json")
    p.set_defaults(run=cmd_train_tokenizer)


def _card_schema_arguments(commands) -> None:
    p = commands.add_parser("card-schema", help="print the JSON Schema of a variant's card (registry table)")
    p.add_argument("--markdown", action="store_true", help="print the field reference of docs/cards.md instead")
    p.set_defaults(run=cmd_card_schema)


def _check_plugin_arguments(commands) -> None:
    p = commands.add_parser("check-plugin", help="run the authors' testing kit on everything a plugin registers")
    p.add_argument("name", help="the plugin's name as `zoo plugins` shows it")
    p.add_argument("--quick", action="store_true", help="conformance only: build each component, skip the model checks")
    p.set_defaults(run=cmd_check_plugin)


def _completion_arguments(commands) -> None:
    p = commands.add_parser("completion", help="print the shell completion script for bash or zsh",
                            description="Print the script that completes zoo's commands, options and variant names. "
                                        "bash: eval \"$(zoo completion bash)\" in ~/.bashrc; "
                                        "zsh: eval \"$(zoo completion zsh)\" in ~/.zshrc.")
    p.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete in")
    p.set_defaults(run=cmd_completion)


def _export_arguments(commands) -> None:
    p = commands.add_parser("export", help="write a variant for Hugging Face transformers or ONNX Runtime")
    p.add_argument("name", help="the variant to export")
    p.add_argument("--format", choices=["hf", "onnx"], required=True,
                   help="hf: a folder AutoModelForCausalLM/AutoTokenizer load; onnx: model.onnx for onnxruntime")
    p.add_argument("--out", type=Path, required=True, help="folder to write (created if missing)")
    p.set_defaults(run=cmd_export)


def _import_arguments(commands) -> None:
    p = commands.add_parser("import", help="add a checkpoint trained elsewhere to the user catalogue ($ZOO_HOME)")
    p.add_argument("source", choices=["nanogpt", "hf"], help="nanogpt: a train.py ckpt.pt; hf: a GPT-2-layout folder")
    p.add_argument("path", type=Path, help="the checkpoint file (nanogpt) or model folder (hf)")
    p.add_argument("--name", required=True, help="the new variant's name (lower case, digits, '-', '.')")
    p.add_argument("--tokenizer", type=Path, default=None,
                   help="its tokenizer: a zoo character vocabulary .json or tiktoken ranks file "
                        "(default: 65 tokens use the zoo's shakespeare characters; hf reads the folder's tokenizer)")
    p.add_argument("--license", default="unspecified",
                   help="the imported weights' license, recorded in the card (default: unspecified; the zoo never assumes one)")
    p.set_defaults(run=cmd_import)


# Each command's arguments, in the order `zoo --help` lists the commands. A
# command line naming one builds that one alone: adding every command's
# arguments cost each command 10-40 ms, a tenth of what `zoo list` may take.
_COMMAND_PARSERS = {
    "list": _list_arguments,
    "search": _search_arguments,
    "show": _show_arguments,
    "load": _load_arguments,
    "sample": _sample_arguments,
    "eval": _eval_arguments,
    "train": _train_arguments,
    "compare": _compare_arguments,
    "experiment": _experiment_arguments,
    "attention": _attention_arguments,
    "gallery": _gallery_arguments,
    "serve": _serve_arguments,
    "verify": _verify_arguments,
    "plugins": _plugins_arguments,
    "new-plugin": _new_plugin_arguments,
    "datasets": _datasets_arguments,
    "remove": _remove_arguments,
    "train-tokenizer": _train_tokenizer_arguments,
    "card-schema": _card_schema_arguments,
    "check-plugin": _check_plugin_arguments,
    "completion": _completion_arguments,
    "export": _export_arguments,
    "import": _import_arguments,
}


class _VersionAction(argparse.Action):
    """`zoo --version`, with the version looked up only when it is asked for:
    reading the installed package's metadata would cost every command time."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        formatter = parser._get_formatter()
        formatter.add_text(f"{parser.prog} {_version()}")
        parser._print_message(formatter.format_help(), sys.stdout)
        parser.exit()


def _global_parser() -> argparse.ArgumentParser:
    """`zoo` with its options before the command, and no commands yet."""
    parser = argparse.ArgumentParser(prog="zoo", description="A model zoo of small transformer language models.",
                                     formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.add_argument("--version", action=_VersionAction, help="print the zoo's version and exit")
    parser.add_argument("--registry", action="append", type=Path, metavar="FILE", default=[],
                        help="also read variants from this registry file (repeatable; added after ZOO_REGISTRY)")
    parser.add_argument("--max-parameters", metavar="N",
                        help="refuse to build a variant estimated above N parameters (default 1,000,000,000; env ZOO_MAX_PARAMETERS)")
    parser.add_argument("--max-memory", metavar="SIZE",
                        help="refuse to build a variant estimated to need more memory for one window, e.g. 32G "
                             "(default 16G; env ZOO_MAX_MEMORY)")
    return parser


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `zoo` parser with every command, or (``command``) with that one
    alone: all that parsing a command line naming it needs."""
    parser = _global_parser()
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, add_arguments in _COMMAND_PARSERS.items():
        if command is None or name == command:
            add_arguments(commands)
    for subparser in commands.choices.values():  # `zoo list --registry F` works as well as `zoo --registry F list`
        subparser.add_argument("--registry", action="append", type=Path, metavar="FILE", dest="sub_registry", default=[],
                               help="also read variants from this registry file (repeatable)")
    finish_help(parser, commands)
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


def cmd_completion(args) -> int:
    import argcomplete

    print(argcomplete.shellcode(["zoo"], shell=args.shell))
    return 0


def _command_to_build(argv: list[str]) -> str | None:
    """The command whose parser alone parses ``argv``: the first word past the
    options before it, when that word is a command. None (build them all) when
    help is asked for or no command is given (both list every command), when the
    word is no command ("did you mean" weighs them all), or when an option is
    spelt in a way only the full parser understands (abbreviated, unknown)."""
    options = _global_parser()._option_string_actions
    words = iter(argv)
    for word in words:
        if not word.startswith("-"):
            return word if word in _COMMAND_PARSERS else None
        action = options.get(word.partition("=")[0])
        if action is None or isinstance(action, argparse._HelpAction):
            return None
        if action.nargs != 0 and "=" not in word:
            next(words, None)  # the option's value, e.g. FILE of `--registry FILE`
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    completing = "_ARGCOMPLETE" in os.environ  # a shell asking for completions: every command, its own argv
    parser = build_parser(None if completing else _command_to_build(argv))
    if completing:  # answers and exits
        import argcomplete

        argcomplete.autocomplete(parser)
    suggestion = unknown_command_message(parser, argv)
    if suggestion:
        parser.print_usage(sys.stderr)
        print(f"zoo: error: {suggestion}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    args.argv = list(argv)
    if args.command is None:  # bare `zoo`: show what there is
        parser.print_help()
        return 0

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


def console_main() -> None:
    """The `zoo` script (and `python -m zoo_core.cli`): `main`, then exit with its status."""
    status = main()
    # Python's shutdown ends with a garbage collection over every object the
    # imports created: about 0.5 s after `import torch` on this machine, and a
    # sixth of `zoo list`. By now the command has closed its files and written
    # its caches, so those objects are frozen out of that last collection. Those
    # not in reference cycles are still released as their modules are torn down;
    # the cycles are left for the operating system to reclaim with the process.
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    console_main()
