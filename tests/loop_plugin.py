"""A third-party plugin package written by hand, as an author who has only the
docs would write it, kept outside the project: `write_loop_plugin(folder)`
writes it into a temporary folder for tests/test_installed_wheel.py to build,
install (non-editable), check, train, ship, sample, compare, serve and
uninstall.

It registers one of each kind the zoo has and nothing transformer-shaped: a
recurrent language model (a GRU, whose context is a state carried forward:
``context_kind = "unbounded"`` with ``step``), a byte-level tokenizer, a
dataset by name, and two variants trained on that dataset.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PLUGIN = "loop"
DISTRIBUTION = "zoo-loop"
PACKAGE = "zoo_loop"
VARIANTS = ("loop-zen", "loop-wide")
WINDOW = 16  # the variants' training window: samples go far past it

# Text of our own (so no licence question), with accents, other scripts and
# emoji: what a byte-level tokenizer is for.
KOANS = "".join(
    f"{n}. The student asked the master about the loop. The master said: "
    f"{['a river carries the stone', 'the café is open, the door is not', 'Привет, the bell rings twice', 'the moon 🌙 keeps no window'][n % 4]}.\n"
    for n in range(160)
)

_PYPROJECT = f"""\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{DISTRIBUTION}"
version = "0.1.0"
dependencies = ["zoo-lm"]

[project.entry-points.zoo]
{PLUGIN} = "{PACKAGE}"

[tool.setuptools]
packages = ["{PACKAGE}"]

[tool.setuptools.package-data]
{PACKAGE} = ["variants/*.toml", "variants/*.safetensors", "data/*.txt"]
"""

_INIT = f'''\
"""{DISTRIBUTION}: a recurrent language model for the zoo."""

from pathlib import Path

from zoo_core import hookimpl

HERE = Path(__file__).resolve().parent


@hookimpl
def register_tokenizers(register):
    register("loop-bytes", "{PACKAGE}.parts:load_bytes")


@hookimpl
def register_models(register):
    register("loop-gru", "{PACKAGE}.parts:build_gru")


@hookimpl
def register_datasets(register):
    register("loop-koans", HERE / "data" / "koans.txt", sha256="{hashlib.sha256(KOANS.encode()).hexdigest()}",
             train_fraction=0.9, description="koans about loops, with accents and emoji")


@hookimpl
def register_variants(register):
    register(HERE / "variants" / "registry.toml")
'''

_PARTS = '''\
"""A byte-level tokenizer and a GRU language model."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Bytes:
    vocab_size = 256

    def encode(self, text):
        return list(text.encode("utf-8"))

    def decode(self, ids):
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


def load_bytes(spec, path):
    return Bytes()


class GRULanguageModel(nn.Module):
    """Embedding, one GRU layer, a linear read-out. Its context is the GRU's
    state, carried forward: ``context_length`` is only the training window."""

    context_kind = "unbounded"

    def __init__(self, vocab_size, context_length, d_model, hidden, **_):
        super().__init__()
        self.context_length = context_length
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.gru = nn.GRU(d_model, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def step(self, idx, state=None):
        out, state = self.gru(self.embedding(idx), state)
        return self.head(out), state

    def forward(self, idx, targets=None):
        logits, _ = self.step(idx)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def attention_maps(self, idx):
        return []


def build_gru(config, components):
    return GRULanguageModel(**config)
'''


def _variant(name: str, hidden: int) -> str:
    return f"""\
[{name}]
description = "A GRU of {hidden} units over UTF-8 bytes, trained on koans."
architecture = "loop-gru"
context_length = {WINDOW}
lineage = "written by hand outside the zoo"
license = "MIT"
tags = ["recurrent"]

[{name}.config]
d_model = 16
hidden = {hidden}

[{name}.tokenizer]
kind = "loop-bytes"
vocab_size = 256

[{name}.recipe]
steps = 30
batch_size = 8
learning_rate = 0.01
eval_every = 15
eval_windows = 8
data = "loop-koans"

[{name}.checkpoint]
path = "{name}.safetensors"
"""


def write_loop_plugin(folder: Path) -> Path:
    """Write the package's source checkout into ``folder``; returns ``folder``."""
    files = {
        "pyproject.toml": _PYPROJECT,
        f"{PACKAGE}/__init__.py": _INIT,
        f"{PACKAGE}/parts.py": _PARTS,
        f"{PACKAGE}/data/koans.txt": KOANS,
        f"{PACKAGE}/variants/registry.toml": _variant(VARIANTS[0], 48) + "\n" + _variant(VARIANTS[1], 64),
    }
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    return folder
