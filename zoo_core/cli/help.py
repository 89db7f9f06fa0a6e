"""Help that teaches: defaults shown for every option, a description for every
command, "did you mean" for a mistyped command, and shell completion of
variant names.

Kept apart from `cli.py` so commands can be added there without touching how
help is made: ``finish_help`` walks the finished parser and fills in what a
command left out (its description, its formatter, completion of variant names).
Nothing here imports torch; completing a variant name reads the catalogue only.
"""

from __future__ import annotations

import argparse
import difflib

# Positional arguments with these names hold variant names, and complete as such.
VARIANT_ARGUMENTS = ("name", "names", "pattern")


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, in words a person reads:
    ``(default: 100)``, ``(default: off)`` for a flag, ``(default: none)``."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default is argparse.SUPPRESS:
            return text
        if action.required or (not action.option_strings and action.nargs not in ("?", "*")):
            return text  # a required argument has no default
        if action.nargs == 0 and isinstance(action.default, bool):  # store_true / store_false
            shown = "on" if action.default else "off"
        elif action.default is None:
            shown = "none"
        elif isinstance(action.default, (list, tuple)):
            shown = " ".join(str(x) for x in action.default)
        else:
            shown = "%(default)s"
        return f"{text} (default: {shown})".strip()


def finish_help(parser: argparse.ArgumentParser, commands: argparse._SubParsersAction) -> None:
    """Give every command a description (its one-line help, if it set none) and
    the defaults formatter, and complete variant names in their arguments."""
    summaries = {action.dest: action.help for action in commands._choices_actions}
    for name, command in commands.choices.items():
        command.formatter_class = DefaultsHelpFormatter
        if not command.description:
            command.description = summaries.get(name)
        for action in command._actions:
            if not action.option_strings and action.dest in VARIANT_ARGUMENTS and not hasattr(action, "completer"):
                action.completer = variant_name_completer if name != "new-plugin" else _no_completion


def _top_level_option(parser: argparse.ArgumentParser, arg: str):
    """The option ``arg`` names, spelt out or (as argparse allows) abbreviated to a
    unique prefix: `zoo --reg FILE list` is `zoo --registry FILE list`."""
    options = parser._option_string_actions
    if arg in options:
        return options[arg]
    matches = {options[name] for name in options if arg.startswith("--") and name.startswith(arg)}
    return matches.pop() if len(matches) == 1 else None


def unknown_command_message(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """For ``zoo lst``: "unknown command 'lst'; did you mean 'list'?" (None when the command exists)."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    word, words = None, iter(argv)
    for arg in words:  # the first word that is neither a top-level option nor its value
        if not arg.startswith("-"):
            word = arg
            break
        action = _top_level_option(parser, arg)
        if action is not None and action.nargs != 0 and "=" not in arg:
            next(words, None)  # e.g. `zoo --registry FILE list`: FILE is no command
    if word is None or word in commands.choices:
        return None
    close = difflib.get_close_matches(word, list(commands.choices), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "; `zoo --help` lists the commands"
    return f"unknown command '{word}'{hint}"


def variant_name_completer(prefix: str, **_) -> list[str]:
    """Variant names starting with ``prefix``, from the catalogue (no torch)."""
    # here: `zoo --help` builds every parser and reads no catalogue (the plugin manager costs it 30 ms)
    from ..loading.lookup import catalogue

    try:
        return [variant.name for variant in catalogue() if variant.name.startswith(prefix)]
    except Exception:  # a broken registry must not break the user's shell
        return []


def _no_completion(prefix: str, **_) -> list[str]:
    return []
