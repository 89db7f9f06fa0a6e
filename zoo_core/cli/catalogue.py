"""Finding and checking variants: list, search, show, load, verify, datasets (list, add, remove), remove, card-schema."""

from __future__ import annotations

import json
import os
import sys
import time

from ..api import catalogue, get_variant, load, unbuildable_reason
from ..catalogue.finding import VariantFilter, find_variants, search_variants
from ..catalogue.provenance import provenance, provenance_lines
from ..catalogue.registry import render_registry
from ..catalogue.removal import remove_variant
from ..corpus.datasets import USER
from ..corpus.user_datasets import add_user_dataset, read_user_datasets, remove_user_dataset
from ..errors import ZooError
from ..plugin_api.manager import get_plugins
from ..sharing.remotes import get_remote
from .options import format_table, listing_actions


def _summary(card) -> dict:
    """The facts `zoo list` shows, from the card alone (``Variant.facts``: no pydantic)."""
    config = card.config
    positions = config.get("positions", "-")
    if isinstance(positions, bool):  # the puzzle's one-hot position slots are on or off
        positions = "one-hot" if positions else "none"
    block = config.get("block")
    norm = config.get("norm", "layernorm")
    placement = "pre" if block and "pre-norm" in block else "post" if block and "post-norm" in block else block
    norm_label = f"{placement}-{ {'layernorm': 'LN', 'rmsnorm': 'RMS'}.get(norm, norm) }" if block else "-"
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


def _architecture_label(card) -> str:
    """The architecture, marked when the variant is an adapter (its parameters are then the adapter's)."""
    return card.architecture if card.adapter is None else f"{card.architecture} + {card.adapter.kind}"


def _warn_catalogue_problems(found) -> None:
    for problem in found.problems:
        print(f"zoo: warning: {problem}", file=sys.stderr)


def _described(args) -> str:
    given = [f"'{args.pattern}'"] if args.pattern else []
    given += [
        f"--{key.replace('_', '-')} {value}"
        for key in ("tag", "architecture", "tokenizer", "dataset")
        for value in ((getattr(args, key) or []) if key == "tag" else [getattr(args, key)])
        if value
    ]
    return " " + " ".join(given) if given else " (no variants registered)"


def _print_variants(args, variants, nothing: str) -> int:
    rows = [{**_summary(v.facts), "source": v.layer, "unbuildable": unbuildable_reason(v)} for v in variants]
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k not in ("train_loss", "accuracy")} for r in rows], indent=2))
        return 0
    if not rows:
        print(nothing, file=sys.stderr)
        return 1
    if getattr(args, "markdown", False):
        print(
            "| name | architecture | layers | positions | norm | context | parameters | train loss | val loss | val bits/byte |"
        )
        print("|---|---|---:|---|---|---:|---:|---:|---:|---:|")
        for variant, r in zip(variants, rows):
            metrics = variant.facts.metrics
            cells = [
                f"`{r['name']}`",
                r["architecture"],
                r["layers"],
                r["positions"],
                r["norm"],
                r["context"],
                f"{r['parameters']:,}" if r["parameters"] is not None else "—",
                *(f"{v:.4f}" if v is not None else "—" for v in (metrics.train_loss, metrics.validation_loss)),
            ]
            if metrics.accuracy is not None:  # task models are scored by accuracy, not loss
                cells[-1] = f"accuracy {metrics.accuracy:.0%}"
            bpb = metrics.validation_bits_per_byte
            cells.append(f"{bpb:.4f}" if bpb is not None else "—")
            print("| " + " | ".join(str(c) for c in cells) + " |")
        return 0
    headers = ["name", "architecture", "layers", "positions", "norm", "context", "parameters", "val loss", "source"]
    table = [
        [
            r["name"],
            _architecture_label(variant.facts),
            r["layers"],
            r["positions"],
            r["norm"],
            r["context"],
            f"{r['parameters']:,}" if r["parameters"] is not None else "-",
            "cannot build"
            if r["unbuildable"]
            else f"{r['validation_loss']:.4f}"
            if r["validation_loss"] is not None
            else "-"
            if r["weights"]
            else "no weights",
            r["source"],
        ]
        for variant, r in zip(variants, rows)
    ]
    print(format_table(headers, table, right={2, 5, 6, 7}))
    blocked = [r for r in rows if r["unbuildable"]]
    if blocked:
        print()
        for r in blocked:
            print(f"cannot build {r['name']}: {r['unbuildable']}")
    return 0


def list_arguments(commands) -> None:
    p = commands.add_parser(
        "list", help="list the catalogue's variants (reads registry files and cached cards only: fast)"
    )
    p.add_argument(
        "pattern", nargs="?", help="part of the name ('rope') or a shell wildcard ('transformer-*') (default: all)"
    )
    p.add_argument("--tag", action="append", help="only variants with this tag; may be repeated (default: any)")
    p.add_argument("--architecture", help="only this architecture, e.g. 'gpt' (default: any)")
    p.add_argument("--tokenizer", help="only this tokenizer kind, e.g. 'bpe' or 'char' (default: any)")
    p.add_argument(
        "--dataset", help="only variants trained on this data: the recipe's file, its name or stem (default: any)"
    )
    p.add_argument(
        "--sort", choices=["validation_loss", "parameters", "name"], help="order of the rows (default: catalogue order)"
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--markdown", action="store_true", help="a Markdown table with train and validation loss")
    p.add_argument(
        "--source",
        choices=["built-in", "plugin", "user", "extra", "remote"],
        help="only variants of this catalogue layer (default: all)",
    )
    p.add_argument(
        "--remote",
        metavar="NAME",
        help="also list what this remote catalogue offers (`zoo remote list`), in the layer 'remote NAME'",
    )
    p.set_defaults(run=cmd_list)


def cmd_list(args) -> int:
    found = catalogue()
    _warn_catalogue_problems(found)
    everything = list(found)
    if args.remote:  # the network, and pydantic for its cards, only when asked for
        from ..sharing.pull import offered_variants

        everything += offered_variants(get_remote(args.remote))
    criteria = VariantFilter(args.pattern, args.tag or [], args.architecture, args.tokenizer, args.dataset)
    variants = [
        v
        for v in find_variants(everything, criteria, args.sort)
        if args.source is None or v.layer.partition(" ")[0] == args.source
    ]
    where = f" in the {args.source} catalogue" if args.source else ""
    return _print_variants(args, variants, "no variant matches" + _described(args) + where)


def search_arguments(commands) -> None:
    p = commands.add_parser("search", help="find variants whose name, description or tags hold every word")
    p.add_argument("text", nargs="+", help="words to look for, e.g. 'rope' or 'no positions'")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run=cmd_search)


def cmd_search(args) -> int:
    text = " ".join(args.text)
    return _print_variants(
        args, search_variants(catalogue(), text), f"no variant's name, description or tags hold '{text}'"
    )


def show_arguments(commands) -> None:
    p = commands.add_parser("show", help="show a variant's card and its provenance")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--json", action="store_true", help="print the card as JSON instead of TOML")
    p.set_defaults(run=cmd_show)


def cmd_show(args) -> int:
    variant = get_variant(args.name)
    found = provenance(variant)
    if args.json:  # the card's fields, and beside them where it came from
        shown = {**variant.card.model_dump(mode="json", exclude_none=True), "provenance": found}
        print(json.dumps(shown, indent=2))
    else:
        print(f"# from {variant.source} ({variant.layer} catalogue, plugin '{variant.plugin}')")
        print("\n".join(provenance_lines(found)))
        print(render_registry([variant.card]), end="")
    return 0


def load_arguments(commands) -> None:
    p = commands.add_parser("load", help="build a variant, verify and load its weights")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--merge",
        action="store_true",
        help="an adapter variant: fold the adapter into its base's weights instead of applying it on the fly",
    )
    p.set_defaults(run=cmd_load)


def cmd_load(args) -> int:
    # torch is imported first and timed apart: it costs the same for every
    # variant, and "loaded in" should say what loading this variant costs.
    started = time.perf_counter()
    import torch  # noqa: F401

    torch_seconds = time.perf_counter() - started
    started = time.perf_counter()
    model = load(args.name, merge_adapter=args.merge)
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
        print(
            f"{model.name}: {model.facts.architecture}, {summary['parameters']:,} parameters, {verification.tensors} tensors"
        )
        print(f"  checkpoint {verification.path}")
        print(f"  verified   {', '.join(verification.checks)} (sha256 {verification.sha256[:16]}…)")
        print(
            f"  loaded in  {total * 1000:.0f} ms (weights {verification.seconds * 1000:.1f} ms; "
            f"importing torch took {torch_seconds * 1000:.0f} ms more)"
        )
    return 0


def verify_arguments(commands) -> None:
    p = commands.add_parser(
        "verify", help="check every checkpoint's sha256, tensors and card; non-zero exit if any fails"
    )
    p.add_argument("pattern", nargs="?", help="shell wildcard, e.g. 'transformer-*' (default: every variant)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run=cmd_verify)


def cmd_verify(args) -> int:
    from ..storage.verify import FAILED, verify_catalogue

    rows = verify_catalogue(args.pattern)
    if not rows:
        raise ZooError(f"no variant matches '{args.pattern}'" if args.pattern else "no variants registered")
    if args.json:
        print(json.dumps([row.as_dict() for row in rows], indent=2))
    else:
        print(
            format_table(
                ["name", "plugin", "file", "status", "detail"],
                [[r.name, r.plugin, r.file, r.status, r.detail] for r in rows],
            )
        )
    failed = [row for row in rows if row.status == FAILED]
    if failed:
        shown = ", ".join(f"{row.name} ({row.file})" for row in failed[:3]) + (" …" if len(failed) > 3 else "")
        raise ZooError(f"{len(failed)} of {len(rows)} failed verification: {shown}")
    return 0


def datasets_arguments(commands) -> None:
    p = commands.add_parser(
        "datasets",
        help="list, add or remove datasets: the built-in one, plugins' and your own",
        description="Datasets by name: `zoo train NAME --data DATASET`, `zoo eval NAME --dataset DATASET` "
        'and recipes (data = "DATASET") read them, checking their sha256. Bare `zoo datasets` lists them.',
    )
    p.set_defaults(run=cmd_datasets)
    action = listing_actions(p, "datasets_action", "list (the default), add or remove")
    action(
        "list",
        "list every dataset: source (built-in, a plugin or user), size, split, sha256, files",
        "List every dataset: its source (built-in, the plugin that registered it, or user), size, "
        "split rule, sha256 and files (a path, or a glob pattern).",
    )

    add = action(
        "add",
        "register a text file, a folder of text files or a glob pattern as a dataset of your own",
        "Register a text file, a folder of text files (every file under it, hidden ones skipped, in the order "
        "of their relative paths) or a quoted glob pattern ('notes/*.md') as a dataset of your own, in "
        "$ZOO_HOME/datasets.toml. Its size and sha256 are recorded; the files are found again and checked "
        "whenever the dataset is read, so an edited, added or removed file is refused until --replace.",
    )
    add.add_argument("name", help="the dataset's name: lower-case letters, digits, '.' and '-'")
    add.add_argument("path", help="a text file, a folder, or a glob pattern in quotes ('notes/**/*.md')")
    add.add_argument("--description", help="one line for `zoo datasets` (default: none, or the replaced entry's)")
    add.add_argument(
        "--train-fraction",
        type=float,
        metavar="F",
        help="the split rule recorded and listed with the dataset: this share of the characters trains; "
        "a run still splits by its recipe's train_fraction (default: 0.9, or the replaced entry's)",
    )
    add.add_argument(
        "--replace", action="store_true", help="replace your dataset of this name, e.g. to accept its changed files"
    )
    add.set_defaults(run=cmd_datasets_add)

    remove = action(
        "remove",
        "forget one of your own datasets (its files are never touched)",
        "Remove one of your own datasets from $ZOO_HOME/datasets.toml. Only the entry goes: "
        "the files it names are never touched. Built-in and plugin datasets cannot be removed.",
    )
    name = remove.add_argument("name", help="one of your datasets (zoo datasets: source user)")
    name.completer = _user_dataset_names  # type: ignore[attr-defined]
    remove.set_defaults(run=cmd_datasets_remove)


def _user_dataset_names(prefix: str, **_) -> list[str]:
    try:
        return [name for name in read_user_datasets() if name.startswith(prefix)]
    except Exception:  # a damaged file must not break the user's shell
        return []


def _dataset_rows() -> list[dict]:
    """Every dataset, usable ones by name, then the user's that plugins shadow."""
    plugins = get_plugins()

    def row(d, shadowed_by: list[str] | None = None) -> dict:
        size = d.size
        if size is None:
            try:
                size = os.stat(d.path).st_size
            except OSError:
                size = None
        info = plugins.plugins.get(d.plugin)
        return {
            "name": d.name,
            "source": USER if d.plugin == USER else "built-in" if info is not None and info.builtin else d.plugin,
            "plugin": d.plugin,
            "kind": d.kind,
            "file": str(d.path),
            "size": size,
            "sha256": d.sha256,
            "train_fraction": d.train_fraction,
            "description": d.description,
            "added": d.added or None,
            "shadowed_by": shadowed_by,
        }

    datasets = plugins.datasets
    rows = [row(d) for d in datasets]
    rows += [row(d, datasets.plugin_owners(d.name)) for d in datasets.shadowed()]
    return rows


def cmd_datasets(args) -> int:
    rows = _dataset_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        raise ZooError("no datasets registered")
    print(
        format_table(
            ["name", "source", "size", "split", "sha256", "files"],
            [
                [
                    r["name"],
                    r["source"] + (" (shadowed)" if r["shadowed_by"] else ""),
                    f"{r['size']:,}" if r["size"] is not None else "-",
                    f"{r['train_fraction']:.0%} train",
                    r["sha256"][:16] + "…",
                    r["file"] + ("/" if r["kind"] == "folder" else ""),
                ]
                for r in rows
            ],
            right={2},
        )
    )
    shadowed = [r for r in rows if r["shadowed_by"]]
    if shadowed:
        print()
        for r in shadowed:
            owners = " and ".join(f"'{p}'" for p in r["shadowed_by"])
            print(
                f"your dataset '{r['name']}' is unused: plugin {owners} registers that name too, and wins; "
                f"`zoo datasets remove {r['name']}`, then add it under another name"
            )
    return 0


def cmd_datasets_add(args) -> int:
    dataset, text, replaced = add_user_dataset(
        args.name, args.path, args.description, args.train_fraction, replace=args.replace
    )
    count = len(text.files)
    print(
        f"{'replaced' if replaced else 'added'} dataset '{dataset.name}': {count} file{'s' if count != 1 else ''}, "
        f"{dataset.size:,} bytes, sha256 {dataset.sha256[:16]}…"
    )
    return 0


def cmd_datasets_remove(args) -> int:
    removed = remove_user_dataset(args.name)
    print(f"removed dataset '{removed.name}' from your datasets; its files ({removed.path}) are untouched")
    return 0


def remove_arguments(commands) -> None:
    p = commands.add_parser("remove", help="delete one of your own variants (card and weights) from your catalogue")
    p.add_argument("name", help="a variant of your catalogue (zoo list --source user)")
    p.set_defaults(run=cmd_remove)


def cmd_remove(args) -> int:
    deleted = remove_variant(args.name)
    print(f"removed '{args.name}' from your catalogue" + "".join(f"\n  deleted {path}" for path in deleted))
    return 0


def card_schema_arguments(commands) -> None:
    p = commands.add_parser("card-schema", help="print the JSON Schema of a variant's card (registry table)")
    p.add_argument("--markdown", action="store_true", help="print the field reference of docs/cards.md instead")
    p.set_defaults(run=cmd_card_schema)


def cmd_card_schema(args) -> int:
    from ..catalogue.card_docs import card_schema, cards_markdown

    print(cards_markdown() if args.markdown else json.dumps(card_schema(), indent=2))
    return 0
