"""The shell around `zoo`: `zoo help COMMAND`, and completion scripts for bash and zsh."""

from __future__ import annotations

import argcomplete

from ..errors import ZooError, did_you_mean
from . import COMMANDS, build_parser
from .help import subcommands, unknown_command_message


def cmd_help(args) -> int:
    """`zoo help train [ACTION]` prints what `zoo train [ACTION] --help` does: the
    habit git, pip and cargo teach, which `zoo` once answered with "did you mean 'eval'?"."""
    words = args.topic
    parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
    problem = unknown_command_message(parser, words)
    if problem:
        raise ZooError(problem)
    for word in words:
        actions = subcommands(parser)
        if actions is None or word not in actions.choices:
            hint = did_you_mean(word, actions.choices) if actions else ""
            raise ZooError(
                f"`{parser.prog}` has no action '{word}'{hint or f'; `{parser.prog} --help` lists what it takes'}"
            )
        parser = actions.choices[word]
    parser.print_help()
    return 0


def cmd_completion(args) -> int:
    print(argcomplete.shellcode(["zoo"], shell=args.shell))
    return 0
