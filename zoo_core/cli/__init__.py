"""The `zoo` command.

Errors a user can cause end in one line on stderr and exit status 1 (2 for bad
usage); `--debug` shows the traceback instead.

This package is the cold-start front (docs/architecture.md): `zoo list`,
`search`, `show`, help and shell completion never import torch or pydantic.
Each command family has its parsers in ``parsers/FAMILY.py`` (``NAME_arguments``),
light, since help and completion build every one, and its handlers
(``cmd_NAME``) in ``FAMILY.py``, which import what they use at their top. A
parser names its handler as ``run="FAMILY:cmd_NAME"``; ``main`` imports that
family's handlers only when the command runs (tests/test_import_budget.py).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from pathlib import Path

from ..catalogue.limits import parse_size
from ..errors import ZooError
from ..storage.files import describe_os_error
from .bounds import check_numbers
from .help import DefaultsHelpFormatter, finish_help, unknown_command_message, unrecognized_message


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zoo-lm")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


# Every command and its family (parsers in zoo_core/cli/parsers/FAMILY.py), in the order
# `zoo --help` lists them. A command line naming one command imports its family
# alone and builds that one parser: the others' arguments and imports are never paid.
COMMANDS = {
    "list": "catalogue",
    "search": "catalogue",
    "show": "catalogue",
    "load": "catalogue",
    "sample": "sampling",
    "chat": "chat",
    "eval": "evaluation",
    "train": "training",
    "merge": "training",
    "compare": "evaluation",
    "experiment": "training",
    "attention": "evaluation",
    "inspect": "evaluation",
    "gallery": "web",
    "serve": "web",
    "verify": "maintenance",
    "plugins": "plugins",
    "new-plugin": "plugins",
    "datasets": "maintenance",
    "remove": "maintenance",
    "cache": "caching",
    "train-tokenizer": "training",
    "card-schema": "maintenance",
    "check-plugin": "plugins",
    "help": "shell",
    "completion": "shell",
    "export": "interop",
    "import": "interop",
    "quantize": "interop",
    "pack": "sharing",
    "install": "sharing",
    "remote": "remotes",
    "pull": "remotes",
}


def _add_arguments(commands, name: str) -> None:
    """Add command ``name``'s parser, defined as ``NAME_arguments`` in its family's parsers."""
    family = importlib.import_module(f".parsers.{COMMANDS[name]}", __name__)
    getattr(family, name.replace("-", "_") + "_arguments")(commands)


def _handler(run: str):
    """The handler a parser names as ``"FAMILY:cmd_NAME"``, its family's handlers
    (zoo_core/cli/FAMILY.py, with their imports) imported now it runs."""
    family, _, name = run.partition(":")
    return getattr(importlib.import_module(f".{family}", __name__), name)


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
    parser = argparse.ArgumentParser(
        prog="zoo",
        description="A model zoo of small transformer language models.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.add_argument("--version", action=_VersionAction, help="print the zoo's version and exit")
    parser.add_argument(
        "--registry",
        action="append",
        type=Path,
        metavar="FILE",
        default=[],
        help="also read variants from this registry file (repeatable; added after ZOO_REGISTRY)",
    )
    parser.add_argument(
        "--only-registry",
        type=Path,
        metavar="FILE",
        help="read variants from this registry file alone, no other layer: e.g. a `zoo train --out` run "
        "whose name the catalogue also has",
    )
    parser.add_argument(
        "--max-parameters",
        metavar="N",
        help="refuse to build a variant estimated above N parameters (default 1,000,000,000; env ZOO_MAX_PARAMETERS)",
    )
    parser.add_argument(
        "--max-memory",
        metavar="SIZE",
        help="refuse to build a variant estimated to need more memory for one window, e.g. 32G "
        "(default 16G; env ZOO_MAX_MEMORY)",
    )
    return parser


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `zoo` parser with every command, or (``command``) with that one
    alone: all that parsing a command line naming it needs."""
    parser = _global_parser()
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if command is None or name == command:
            _add_arguments(commands, name)
    for subparser in commands.choices.values():  # `zoo list --registry F` works as well as `zoo --registry F list`
        subparser.add_argument(
            "--registry",
            action="append",
            type=Path,
            metavar="FILE",
            dest="sub_registry",
            default=[],
            help="also read variants from this registry file (repeatable)",
        )
    finish_help(parser, commands)
    return parser


# Options handed on the way their environment variables are, read where they apply.
_HANDED_ON = (
    ("max_parameters", "ZOO_MAX_PARAMETERS"),
    ("max_memory", "ZOO_MAX_MEMORY"),
    ("deadline", "ZOO_DOWNLOAD_DEADLINE"),  # zoo_core.sharing.download
    ("min_rate", "ZOO_DOWNLOAD_MIN_RATE"),
)


def _apply_limits(args) -> dict[str, str | None]:
    """Check every number the command line gives (`bounds`), and hand
    --max-parameters / --max-memory (zoo_core.catalogue.limits reads them) and
    --deadline / --min-rate on as their environment variables; returns what to
    restore afterwards."""
    check_numbers(args)
    before = {}
    for option, variable in _HANDED_ON:
        value = getattr(args, option, None)
        if value is not None:
            if option.startswith("max_"):
                parse_size(value, "--" + option.replace("_", "-"))
            before[variable] = os.environ.get(variable)
            os.environ[variable] = str(value)
    return before


def _restore_environment(before: dict[str, str | None]) -> None:
    for variable, value in before.items():
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = value


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
            return word if word in COMMANDS else None
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
    # A mistyped command or option is one line with the likely meant one, as git and pip answer it.
    suggestion = unknown_command_message(parser, argv)
    if suggestion:
        print(f"zoo: error: {suggestion}", file=sys.stderr)
        return 2
    args, unrecognized = parser.parse_known_args(argv)
    if unrecognized:
        print(f"zoo: error: {unrecognized_message(parser, args, unrecognized)}", file=sys.stderr)
        return 2
    args.argv = list(argv)
    if args.command is None:  # bare `zoo`: show what there is
        parser.print_help()
        return 0

    # The catalogue (and the plugin manager under it) only now a command runs: help never reads it.
    from ..catalogue.layers import set_command_line_registries

    set_command_line_registries([*args.registry, *args.sub_registry], args.only_registry)

    changed: dict[str, str | None] = {}
    try:
        changed = _apply_limits(args)
        return _handler(args.run)(args)
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

        where = f"{exc.filename}: " if exc.filename else ""
        print(f"zoo: error: {where}{describe_os_error(exc)}", file=sys.stderr)
        return 1
    finally:
        _restore_environment(changed)
        # A command's --registry is its own: main called in-process (tests, notebooks)
        # must not leave it in the catalogue the Python API reads afterwards.
        set_command_line_registries(None)


def console_main() -> None:
    """The `zoo` script (and `python -m zoo_core.cli`): `main`, then exit with its status."""
    status = main()
    # Python's shutdown ends with a garbage collection over every object the
    # imports created, a visible share of a command's time once torch is
    # imported (benchmarks/bench_coldstart.py measures it). By now the command has closed its files and written
    # its caches, so those objects are frozen out of that last collection. Those
    # not in reference cycles are still released as their modules are torn down;
    # the cycles are left for the operating system to reclaim with the process.
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":  # python -m zoo_core.cli
    console_main()
