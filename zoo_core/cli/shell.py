"""The shell around `zoo`: completion scripts for bash and zsh."""

from __future__ import annotations

import argcomplete


def cmd_completion(args) -> int:
    print(argcomplete.shellcode(["zoo"], shell=args.shell))
    return 0
