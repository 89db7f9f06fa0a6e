"""Help that teaches: defaults shown for every option, a description for every
command, "did you mean" for a mistyped command or option, and shell completion
of variant names.

Kept apart from `cli.py` so commands can be added there without touching how
help is made: ``finish_help`` walks the finished parser and fills in what a
command left out (its description, its formatter, completion of variant names;
what each other name completes to is in ``completers``). Nothing here imports
torch; completing a variant name reads the catalogue only.
"""

from __future__ import annotations

import argparse

from ..errors import did_you_mean
from . import completers

# Positional arguments with these names hold variant names, and complete as such.
VARIANT_ARGUMENTS = ("name", "names", "pattern")


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, in words a person reads:
    ``(default: 100)``, ``(default: off)`` for a flag, ``(default: none)``; an
    empty default (a repeatable option given no times) is left out, not shown as
    ``(default: )``."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default is argparse.SUPPRESS or action.default in ([], (), ""):
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
                completers.complete_with(action, completers.variant_names)


def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    """The commands (or a command's actions: `zoo datasets add`) ``parser`` chooses between, if any."""
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


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
    commands = subcommands(parser)
    assert commands is not None, "the zoo parser has its commands"
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
    hint = did_you_mean(word, commands.choices) or "; `zoo --help` lists the commands"
    return f"unknown command '{word}'{hint}"


def unrecognized_message(parser: argparse.ArgumentParser, args: argparse.Namespace, words: list[str]) -> str:
    """What argparse left over from a command line, in one line: for `zoo sample
    NAME --promt x`, "unrecognized option '--promt' of `zoo sample`; did you mean
    '--prompt'?", weighing the options of the command (and action) that ran and
    the zoo's own; other words as argparse says them."""
    option = next((word.partition("=")[0] for word in words if word.startswith("-") and word != "-"), None)
    if option is None:
        return f"unrecognized arguments: {' '.join(words)}"
    command, known = parser, list(parser._option_string_actions)
    while (chosen := subcommands(command)) is not None and getattr(args, chosen.dest, None) in chosen.choices:
        command = chosen.choices[getattr(args, chosen.dest)]
        known += command._option_string_actions
    # Closer than for commands: every option shares its leading "--", which alone makes '--promt' like '--version'.
    hint = did_you_mean(option, known, cutoff=0.75) or f"; `{command.prog} --help` lists its options"
    return f"unrecognized option '{option}' of `{command.prog}`{hint}"
