"""Finding variants: list, search, show, and load.

The cold-start front: `zoo list` imports this family alone, so it imports
nothing at its top that listing does not use."""

from __future__ import annotations

import json
import sys
import time

from ..catalogue.finding import VariantFilter, find_variants, search_variants, validation_data_of
from ..catalogue.provenance import provenance, provenance_lines
from ..catalogue.registry import render_index_entries
from ..loading.lookup import catalogue, get_variant, unbuildable_reason
from ..plugin_api.manager import PluginSet, get_plugins
from .tables import render_table

# The columns of `zoo list` an architecture fills in itself (register_models' ``listed=``).
ARCHITECTURE_COLUMNS = ("layers", "positions", "norm")


def _summary(card: dict, plugins: PluginSet) -> dict:
    """What `zoo list` shows, from the card's index entry alone (``Variant.index``: no pydantic)."""
    columns = _architecture_columns(card, plugins)
    return {
        "name": card["name"],
        "architecture": card["architecture"],
        **columns,
        "context": card["context_length"],
        "parameters": card.get("parameters"),
        "validation_loss": card["metrics"].get("validation_loss"),
        "tokenizer": card["tokenizer"]["kind"],
        "weights": card["checkpoint"].get("sha256") is not None,
    }


def _architecture_columns(card: dict, plugins: PluginSet) -> dict:
    """The layers, positions and norm columns, as the card's architecture says to fill
    them (``listed=`` at registration; `-` where it says nothing): the core knows no
    architecture's settings."""
    listed = plugins.components["models"].declared(card["architecture"], "listed") or {}
    config = card["config"] or {}
    shown = {}
    for column in ARCHITECTURE_COLUMNS:
        how = listed.get(column)
        try:
            value = how(config) if callable(how) else config.get(how) if isinstance(how, str) else None
        except Exception:  # a plugin's function on a card it did not expect: that cell, not the listing, fails
            value = None
        shown[column] = "-" if value is None else value
    return shown


def _architecture_label(card: dict) -> str:
    """The architecture, marked when the variant is an adapter (its parameters are then the adapter's)."""
    adapter = card.get("adapter")
    return card["architecture"] if adapter is None else f"{card['architecture']} + {adapter['kind']}"


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
    plugins = get_plugins()
    rows = [
        {
            **_summary(v.index, plugins),
            "validation_data": validation_data_of(v) if v.index["metrics"].get("validation_loss") is not None else None,
            "source": v.layer,
            "unbuildable": unbuildable_reason(v, plugins),
        }
        for v in variants
    ]
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
            metrics = variant.index["metrics"]
            cells = [
                f"`{r['name']}`",
                r["architecture"],
                r["layers"],
                r["positions"],
                r["norm"],
                r["context"],
                f"{r['parameters']:,}" if r["parameters"] is not None else "—",
                *(
                    f"{v:.4f}" if v is not None else "—"
                    for v in (metrics.get("train_loss"), metrics.get("validation_loss"))
                ),
            ]
            if metrics.get("accuracy") is not None:  # task models are scored by accuracy, not loss
                cells[-1] = f"accuracy {metrics['accuracy']:.0%}"
            bpb = metrics.get("validation_bits_per_byte")
            cells.append(f"{bpb:.4f}" if bpb is not None else "—")
            print("| " + " | ".join(str(c) for c in cells) + " |")
        return 0
    # Validation figures on different texts do not compare: the column after the loss says on which.
    headers = [
        "name",
        "architecture",
        "layers",
        "positions",
        "norm",
        "context",
        "parameters",
        "val loss",
        "val text",
        "source",
    ]
    table = [
        [
            r["name"],
            _architecture_label(variant.index),
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
            r["validation_data"] or "-",
            r["source"],
        ]
        for variant, r in zip(variants, rows)
    ]
    print(render_table(headers, table, right={2, 5, 6, 7}))
    blocked = [r for r in rows if r["unbuildable"]]
    if blocked:
        print()
        for r in blocked:
            print(f"cannot build {r['name']}: {r['unbuildable']}")
    return 0


def cmd_list(args) -> int:
    found = catalogue()
    _warn_catalogue_problems(found)
    everything = list(found)
    if args.remote:  # the network, and pydantic for its cards, only when asked for
        from ..sharing import pull, remotes

        everything += pull.offered_variants(remotes.get_remote(args.remote))
    criteria = VariantFilter(args.pattern, args.tag or [], args.architecture, args.tokenizer, args.dataset)
    variants = [
        v
        for v in find_variants(everything, criteria, args.sort)
        if args.source is None or v.layer.partition(" ")[0] == args.source
    ]
    where = f" in the {args.source} catalogue" if args.source else ""
    return _print_variants(args, variants, "no variant matches" + _described(args) + where)


def cmd_search(args) -> int:
    text = " ".join(args.text)
    return _print_variants(
        args, search_variants(catalogue(), text), f"no variant's name, description or tags hold '{text}'"
    )


def cmd_show(args) -> int:
    variant = get_variant(args.name)
    found = provenance(variant)
    if args.json:  # the card's fields, and beside them where it came from
        shown = {**variant.index, "provenance": found}
        print(json.dumps(shown, indent=2))
    else:
        print(f"# from {variant.source} ({variant.layer} catalogue, plugin '{variant.plugin}')")
        print("\n".join(provenance_lines(found)))
        if variant.index.get("adapter"):
            print(_adapter_parameters(variant.index))
        print(render_index_entries([variant.index]), end="")
    return 0


def _adapter_parameters(card: dict) -> str:
    """The line `zoo show` adds for an adapter variant: its parameters are the adapter's own
    (as `zoo list` and `zoo compare` count them), its base's beside them."""
    base_name = card["adapter"]["base"]
    base = catalogue().find(base_name)
    counted = base.index.get("parameters") if base is not None else None
    base_text = f"{counted:,} parameters" if counted is not None else "not in the catalogue"
    return f"# parameters: {card.get('parameters') or 0:,} of the adapter's own, applied to base '{base_name}' ({base_text})"


def cmd_load(args) -> int:
    # torch is imported first and timed apart: it costs the same for every
    # variant, and "loaded in" should say what loading this variant costs.
    started = time.perf_counter()
    import torch  # noqa: F401

    torch_seconds = time.perf_counter() - started
    started = time.perf_counter()
    from ..loading.api import load  # the heavy part behind the front; its import was always part of "loaded in"

    model = load(args.name, merge_adapter=args.merge)
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
        "torch_import_seconds": round(torch_seconds, 4),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"{model.name}: {model.card.architecture}, {summary['parameters']:,} parameters, {verification.tensors} tensors"
        )
        print(f"  checkpoint {verification.path}")
        print(f"  verified   {', '.join(verification.checks)} (sha256 {verification.sha256[:16]}…)")
        print(
            f"  loaded in  {total * 1000:.0f} ms (weights {verification.seconds * 1000:.1f} ms; "
            f"importing torch took {torch_seconds * 1000:.0f} ms more)"
        )
    return 0
