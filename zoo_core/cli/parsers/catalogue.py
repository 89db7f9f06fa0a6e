"""The parsers of finding variants: list, search, show, and load. Their handlers are in zoo_core/cli/catalogue.py."""

from __future__ import annotations

from .. import completers
from ..completers import complete_with


def list_arguments(commands) -> None:
    p = commands.add_parser(
        "list", help="list the catalogue's variants (reads registry files and cached cards only: fast)"
    )
    p.add_argument(
        "pattern", nargs="?", help="part of the name ('rope') or a shell wildcard ('transformer-*') (default: all)"
    )
    tag = p.add_argument("--tag", action="append", help="only variants with this tag; may be repeated (default: any)")
    complete_with(tag, completers.tags)
    architecture = p.add_argument("--architecture", help="only this architecture, e.g. 'gpt' (default: any)")
    complete_with(architecture, completers.architectures)
    tokenizer = p.add_argument("--tokenizer", help="only this tokenizer kind, e.g. 'bpe' or 'char' (default: any)")
    complete_with(tokenizer, completers.tokenizer_kinds)
    dataset = p.add_argument(
        "--dataset", help="only variants trained on this data: the recipe's file, its name or stem (default: any)"
    )
    complete_with(dataset, completers.dataset_names)
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
    remote = p.add_argument(
        "--remote",
        metavar="NAME",
        help="also list what this remote catalogue offers (`zoo remote list`), in the layer 'remote NAME'",
    )
    complete_with(remote, completers.remote_names)
    p.set_defaults(run="catalogue:cmd_list")


def search_arguments(commands) -> None:
    p = commands.add_parser("search", help="find variants whose name, description or tags hold every word")
    p.add_argument("text", nargs="+", help="words to look for, e.g. 'rope' or 'no positions'")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run="catalogue:cmd_search")


def show_arguments(commands) -> None:
    p = commands.add_parser("show", help="show a variant's card and its provenance")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--json", action="store_true", help="print the card as JSON instead of TOML")
    p.set_defaults(run="catalogue:cmd_show")


def load_arguments(commands) -> None:
    p = commands.add_parser("load", help="build a variant, verify and load its weights")
    p.add_argument("name", help="the variant (see `zoo list`)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--merge",
        action="store_true",
        help="an adapter variant: fold the adapter into its base's weights instead of applying it on the fly",
    )
    p.set_defaults(run="catalogue:cmd_load")
