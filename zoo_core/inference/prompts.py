"""Where a prompt comes from: the command line, a file, or standard input.

The command line limits a prompt to what the OS allows in an argument list
(about 128 KiB per argument on Linux), so longer prompts come from a file
(``--prompt-file PATH``) or from standard input (``--prompt -``). Either way the
prompt is capped at ``MAX_PROMPT_BYTES``: the model sees only its last window,
and a cap keeps a runaway pipe from filling memory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from ..errors import ZooError
from ..storage.files import describe_os_error, read_limited

MAX_PROMPT_BYTES = 16 * 1024 * 1024


def read_prompt(prompt: str | None, prompt_file: Path | None, stdin: BinaryIO | None = None) -> str:
    """The prompt text: ``prompt`` itself, or ``-`` for standard input, or the file's text."""
    if prompt is not None and prompt_file is not None:
        raise ZooError("give the prompt once: --prompt TEXT, --prompt - (standard input) or --prompt-file PATH")
    if prompt_file is not None:
        try:
            data = read_limited(prompt_file, MAX_PROMPT_BYTES, "prompt file")
        except FileNotFoundError:
            raise ZooError(f"{prompt_file}: prompt file not found") from None
        except OSError as exc:
            raise ZooError(f"{prompt_file}: cannot read prompt file: {describe_os_error(exc)}") from None
        return _decode(data, str(prompt_file))
    if prompt == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        data = stream.read(MAX_PROMPT_BYTES + 1)
        if len(data) > MAX_PROMPT_BYTES:
            raise ZooError(
                f"the prompt on standard input is more than {MAX_PROMPT_BYTES:,} bytes, the most a prompt may be"
            )
        return _decode(data, "standard input")
    if prompt is None:
        raise ZooError("give a prompt: --prompt TEXT, --prompt - (standard input) or --prompt-file PATH")
    return prompt


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ZooError(f"{where}: the prompt is not UTF-8 text (byte {exc.start})") from None
