"""The parsers of looking after the catalogue: verify, datasets (list, add, remove), remove, card-schema. Their handlers are in zoo_core/cli/maintenance.py and checks.py."""

from __future__ import annotations

from .. import completers
from ..completers import complete_with
from .options import listing_actions


def verify_arguments(commands) -> None:
    p = commands.add_parser(
        "verify", help="check every checkpoint's sha256, tensors and card; non-zero exit if any fails"
    )
    p.add_argument("pattern", nargs="?", help="shell wildcard, e.g. 'transformer-*' (default: every variant)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run="checks:cmd_verify")


def datasets_arguments(commands) -> None:
    p = commands.add_parser(
        "datasets",
        help="list, add or remove datasets: the built-in one, plugins' and your own",
        description="Datasets by name: `zoo train NAME --data DATASET`, `zoo eval NAME --data DATASET` "
        'and recipes (data = "DATASET") read them, checking their sha256. Bare `zoo datasets` lists them.',
    )
    p.set_defaults(run="maintenance:cmd_datasets")
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
    add.set_defaults(run="maintenance:cmd_datasets_add")

    remove = action(
        "remove",
        "forget one of your own datasets (its files are never touched)",
        "Remove one of your own datasets from $ZOO_HOME/datasets.toml. Only the entry goes: "
        "the files it names are never touched. Built-in and plugin datasets cannot be removed.",
    )
    name = remove.add_argument("name", help="one of your datasets (zoo datasets: source user)")
    complete_with(name, completers.user_dataset_names)
    remove.set_defaults(run="maintenance:cmd_datasets_remove")


def remove_arguments(commands) -> None:
    p = commands.add_parser("remove", help="delete one of your own variants (card and weights) from your catalogue")
    p.add_argument("name", help="a variant of your catalogue (zoo list --source user)")
    p.add_argument(
        "--with-adapters",
        action="store_true",
        help="also remove the adapters (e.g. LoRA) that apply to it; without it, removing a base they use is refused",
    )
    p.set_defaults(run="maintenance:cmd_remove")


def card_schema_arguments(commands) -> None:
    p = commands.add_parser("card-schema", help="print the JSON Schema of a variant's card (registry table)")
    p.add_argument("--markdown", action="store_true", help="print the field reference of docs/cards.md instead")
    p.set_defaults(run="checks:cmd_card_schema")
