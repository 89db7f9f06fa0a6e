"""How ``--device`` and ``--dtype`` are spelt, checked without torch.

A command's parser names and checks them, and every parser is built for
`zoo --help` and for shell completion, which must not import torch; whether
this machine has the device is asked later (zoo_core.devices).
"""

from __future__ import annotations

import argparse
import re

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N or mps"
DTYPE_CHOICES = ("float32", "bfloat16", "float16")
DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def device_argument(text: str) -> str:
    """argparse ``type=`` for ``--device``: the spelling only (no torch import;
    whether the machine has the device is checked when the command runs)."""
    if not DEVICE_PATTERN.match(text):
        raise argparse.ArgumentTypeError(f"'{text}' is not a device; use {DEVICE_CHOICES}")
    return text
