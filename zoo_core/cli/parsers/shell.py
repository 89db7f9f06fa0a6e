"""The parsers of the shell around `zoo`: completion scripts for bash and zsh. Their handlers are in zoo_core/cli/shell.py."""

from __future__ import annotations


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
