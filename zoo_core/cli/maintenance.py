"""Looking after the catalogue: verify, datasets (list, add, remove), remove, card-schema."""

from __future__ import annotations

import json
import os

from ..catalogue.removal import remove_variant
from ..corpus.datasets import USER
from ..corpus.user_datasets import add_user_dataset, read_user_datasets, remove_user_dataset
from ..errors import ZooError
from ..plugin_api.manager import get_plugins
from .options import format_table, listing_actions


def verify_arguments(commands) -> None:
    p = commands.add_parser(
        "verify", help="check every checkpoint's sha256, tensors and card; non-zero exit if any fails"
    )
    p.add_argument("pattern", nargs="?", help="shell wildcard, e.g. 'transformer-*' (default: every variant)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run=cmd_verify)


def cmd_verify(args) -> int:
    from ..loading.verify import FAILED, verify_catalogue

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
        description="Datasets by name: `zoo train NAME --data DATASET`, `zoo eval NAME --data DATASET` "
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
        args.name, args.path, args.description, args.train_fraction, replace=args.replace, plugins=get_plugins()
    )
    count = len(text.files)
    print(
        f"{'replaced' if replaced else 'added'} dataset '{dataset.name}': {count} file{'s' if count != 1 else ''}, "
        f"{dataset.size:,} bytes, sha256 {dataset.sha256[:16]}…"
    )
    return 0


def cmd_datasets_remove(args) -> int:
    removed = remove_user_dataset(args.name, plugins=get_plugins())
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
