"""The parsers of the shell around `zoo`: `zoo help COMMAND` and the completion
scripts for bash and zsh. Their handlers are in zoo_core/cli/shell.py."""

from __future__ import annotations

from ..completers import complete_with


def help_arguments(commands) -> None:
    p = commands.add_parser(
        "help",
        help="show a command's help: `zoo help train` is `zoo train --help`",
        description="Show the help of a command, or of one of its actions (`zoo help datasets add`); "
        "bare `zoo help` lists every command, as `zoo --help` does.",
    )
    topic = p.add_argument(
        "topic", nargs="*", metavar="COMMAND", help="the command, and its action for those that have some"
    )
    # Every command, read when the shell completes (by then every parser is built; this one is not the last).
    complete_with(topic, lambda prefix, **_: [name for name in commands.choices if name.startswith(prefix)])
    p.set_defaults(run="shell:cmd_help")


def completion_arguments(commands) -> None:
    p = commands.add_parser(
        "completion",
        help="print the shell completion script for bash or zsh",
        description="Print the script that completes zoo's commands, options and variant names. "
        'bash: eval "$(zoo completion bash)" in ~/.bashrc; '
        'zsh: eval "$(zoo completion zsh)" in ~/.zshrc.',
    )
    p.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete in")
    p.set_defaults(run="shell:cmd_completion")
