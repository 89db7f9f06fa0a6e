"""Finding and checking variants: list, search, show, load, verify, datasets, remove, card-schema."""

from __future__ import annotations

import json
import sys
import time

from ..errors import ZooError
from .options import format_table


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
    from ..api import unbuildable_reason

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
            r["architecture"],
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
        for r in rows
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
        choices=["built-in", "plugin", "user", "extra"],
        help="only variants of this catalogue layer (default: all)",
    )
    p.set_defaults(run=cmd_list)


def cmd_list(args) -> int:
    from ..api import catalogue
    from ..catalogue.finding import VariantFilter, find_variants

    found = catalogue()
    _warn_catalogue_problems(found)
    criteria = VariantFilter(args.pattern, args.tag or [], args.architecture, args.tokenizer, args.dataset)
    variants = [v for v in find_variants(found, criteria, args.sort) if args.source is None or v.layer == args.source]
    where = f" in the {args.source} catalogue" if args.source else ""
    return _print_variants(args, variants, "no variant matches" + _described(args) + where)


def search_arguments(commands) -> None:
    p = commands.add_parser("search", help="find variants whose name, description or tags hold every word")
    p.add_argument("text", nargs="+", help="words to look for, e.g. 'rope' or 'no positions'")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run=cmd_search)


def cmd_search(args) -> int:
    from ..api import catalogue
    from ..catalogue.finding import search_variants

    text = " ".join(args.text)
    return _print_variants(
        args, search_variants(catalogue(), text), f"no variant's name, description or tags hold '{text}'"
    )


def show_arguments(commands) -> None:
    p = commands.add_parser("show", help="show a variant's card")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--json", action="store_true", help="print the card as JSON instead of TOML")
    p.set_defaults(run=cmd_show)


def cmd_show(args) -> int:
    from ..api import get_variant
    from ..catalogue.registry import render_registry

    variant = get_variant(args.name)
    if args.json:
        print(json.dumps(variant.card.model_dump(mode="json", exclude_none=True), indent=2))
    else:
        print(f"# from {variant.source} ({variant.layer} catalogue, plugin '{variant.plugin}')")
        print(render_registry([variant.card]), end="")
    return 0


def load_arguments(commands) -> None:
    p = commands.add_parser("load", help="build a variant, verify and load its weights")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=cmd_load)


def cmd_load(args) -> int:
    from ..api import load

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
    p = commands.add_parser("datasets", help="list the registered datasets: name, plugin, split rule, sha256, file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=cmd_datasets)


def cmd_datasets(args) -> int:
    from ..plugin_api.manager import get_plugins

    datasets = list(get_plugins().datasets)
    rows = [
        {
            "name": d.name,
            "plugin": d.plugin,
            "file": str(d.path),
            "sha256": d.sha256,
            "train_fraction": d.train_fraction,
            "description": d.description,
        }
        for d in datasets
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        raise ZooError("no datasets registered")
    print(
        format_table(
            ["name", "plugin", "split", "sha256", "file"],
            [
                [r["name"], r["plugin"], f"{r['train_fraction']:.0%} train", r["sha256"][:16] + "…", r["file"]]
                for r in rows
            ],
        )
    )
    return 0


def remove_arguments(commands) -> None:
    p = commands.add_parser("remove", help="delete one of your own variants (card and weights) from your catalogue")
    p.add_argument("name", help="a variant of your catalogue (zoo list --source user)")
    p.set_defaults(run=cmd_remove)


def cmd_remove(args) -> int:
    from ..catalogue.removal import remove_variant

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
