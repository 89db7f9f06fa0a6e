"""`zoo new-plugin NAME`: the skeleton of a third-party plugin package.

What it writes installs as it is (``pip install -e DIR``) and shows up in
`zoo plugins`: a package using every hook (a position encoding named after the
plugin as a do-nothing stub to fill in, a block, a tokenizer, an architecture,
a trainer, an adapter, a dataset registered by name, and a variant trained on
that dataset, with its registry file and package data),
tests that run the zoo's testing kit, and a ``pyproject.toml`` whose ``zoo``
entry point is the whole integration.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from string import Template

from ..errors import ZooError
from ..plugin_api.manager import get_plugins
from ..storage.files import describe_os_error

# An entry-point name that is also a valid position name and, with '-' -> '_',
# a valid Python package name.
_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$distribution"
version = "0.1.0"
description = "A zoo plugin: the '$name' position encoding, block, tokenizer, architecture, trainer, adapter, dataset and variant"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["zoo-lm"]

# The zoo finds its plugins through this entry-point group.
[project.entry-points.zoo]
$name = "$package"

[tool.setuptools]
packages = ["$package"]

# The variant's card and (once trained) checkpoint, and the dataset, travel inside the package.
[tool.setuptools.package-data]
$package = ["variants/*.toml", "variants/*.safetensors", "data/*.txt"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]
"""

_INIT = '''\
"""$distribution: a plugin for the zoo.

Each function below implements one hook of ``zoo_core.plugin_api.hookspecs``; delete the
ones you do not need. Factories are given as "module:attribute" strings so
that `zoo list` does not import torch.
"""

from pathlib import Path

from zoo_core import hookimpl

__version__ = "0.1.0"

HERE = Path(__file__).resolve().parent
VARIANTS = HERE / "variants" / "registry.toml"


@hookimpl
def register_tokenizers(register):
    register("$name-bytes", "$package.parts:load_byte_tokenizer")


@hookimpl
def register_positions(register):
    register("$name", "$package.positions:$cls")


@hookimpl
def register_blocks(register):
    register("$name-block", "$package.parts:$blockcls")


@hookimpl
def register_models(register):
    register("$name-lm", "$package.parts:build_language_model")


@hookimpl
def register_trainers(register):
    register("$name-trainer", "$package.parts:$trainercls")


@hookimpl
def register_adapters(register):
    register("$name-head-delta", "$package.parts:HeadDeltaAdapter")


@hookimpl
def register_datasets(register):
    # Located from this file, so it works installed; the sha256 is checked on every read.
    register("$name-sonnets", HERE / "data" / "sonnets.txt", sha256="$corpus_sha256", train_fraction=0.9,
             description="Shakespeare's Sonnet 18, repeated: enough for a tiny byte-level run")


@hookimpl
def register_variants(register):
    # Paths inside this TOML (the checkpoint) are relative to it.
    register(VARIANTS)
'''

_POSITIONS = '''\
"""The '$name' position encoding."""

from __future__ import annotations

import torch

from zoo_core.plugin_api.components import PositionEncodingBase


class $cls(PositionEncodingBase):
    """A stub: as generated it tells the model nothing about positions.

    Override the method your encoding needs and delete the others:
    ``embed`` adds to the residual stream (B, T, C) before the first block,
    ``rotate`` turns queries and keys (B, H, T, D) inside attention (as RoPE),
    ``bias`` returns an (H, Tq, Tk) tensor added to attention scores (as ALiBi).
    Parameters (``nn.Parameter``) are trained and saved with the model.
    """

    def __init__(self, d_model: int, n_head: int, context_length: int, **_: object):
        super().__init__()
        self.d_model, self.n_head, self.context_length = d_model, n_head, context_length

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x

    def rotate(self, q, k, q_positions, k_positions):
        return q, k

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor | None:
        return None
'''

_PARTS = '''\
"""The other parts this plugin registers: each a working starting point to change."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from zoo_plugins.blocks.attention import CausalSelfAttention
from zoo_plugins.blocks.blocks import FeedForward, make_norm
from zoo_core.training.loop import StandardTrainer


class ByteTokenizer:
    """UTF-8 bytes as tokens: 256 ids, no vocabulary file."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


def load_byte_tokenizer(spec, path) -> ByteTokenizer:
    return ByteTokenizer()


class $blockcls(nn.Module):
    """A pre-norm block from the zoo's reusable parts; passing ``cache`` on to
    the attention is what makes KV-cache sampling work."""

    def __init__(self, d_model: int, n_head: int, d_ff: int | None = None, dropout: float = 0.0, norm: str = "layernorm", **_: object):
        super().__init__()
        self.norm1 = make_norm(norm, d_model)
        self.attention = CausalSelfAttention(d_model, n_head, dropout)
        self.norm2 = make_norm(norm, d_model)
        self.feed_forward = FeedForward(d_model, d_ff or 4 * d_model, dropout)

    def forward(self, x, positions, encoding, need_weights=False, cache=None):
        update, weights = self.attention(self.norm1(x), positions, encoding, need_weights, cache)
        x = x + update
        return x + self.feed_forward(self.norm2(x)), weights


def build_language_model(config, components):
    """An architecture: here the zoo's transformer, built from registered parts by name."""
    return components["models"].create("transformer", config, components)


class $trainercls(StandardTrainer):
    """The zoo's trainer with another optimizer: SGD with Nesterov momentum."""

    def make_optimizer(self, model, recipe):
        return torch.optim.SGD(model.parameters(), lr=recipe.learning_rate, momentum=0.9, nesterov=True,
                               weight_decay=recipe.weight_decay)


class HeadDeltaAdapter:
    """An adapter: a trained change to the output layer's weights (an adapter
    variant's file holds only that tensor). Applied on the fly or merged, it
    is the same sum, so both give the same logits."""

    def __init__(self, config):
        if config:
            raise ValueError(f"the '$name-head-delta' adapter takes no settings, got {sorted(config)}")

    def tensor_shapes(self, network) -> dict[str, tuple[int, ...]]:
        return {"lm_head.delta": tuple(network.lm_head.weight.shape)}

    def apply(self, network, tensors, merge=False) -> None:
        with torch.no_grad():
            network.lm_head.weight += tensors["lm_head.delta"]
'''

_REGISTRY = """\
[$name-tiny]
description = "A tiny variant of the '$name-lm' architecture with the '$name' positions and '$name-block' blocks."
architecture = "$name-lm"
context_length = 16
lineage = "generated by zoo new-plugin"
license = "MIT"
tags = ["example"]

[$name-tiny.config]
d_model = 32
n_layer = 2
n_head = 2
positions = "$name"
block = "$name-block"

[$name-tiny.tokenizer]
kind = "$name-bytes"
vocab_size = 256

[$name-tiny.recipe]
kind = "$name-trainer"
learning_rate = 0.05
steps = 60
batch_size = 8
eval_every = 30
eval_windows = 16
data = "$name-sonnets"   # the dataset this package registers, by name (zoo datasets)

[$name-tiny.checkpoint]
path = "$name-tiny.safetensors"   # written, with its sha256, by the `zoo train` in README.md
"""

# Public-domain text (Shakespeare, Sonnet 18), enough for a tiny byte-level run.
_CORPUS = (
    """\
Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date;
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm'd;
And every fair from fair sometime declines,
By chance or nature's changing course untrimm'd;
But thy eternal summer shall not fade,
Nor lose possession of that fair thou ow'st;
Nor shall Death brag thou wander'st in his shade,
When in eternal lines to time thou grow'st:
So long as men can breathe or eyes can see,
So long lives this, and this gives life to thee.
"""
    * 6
)

_TEST = '''\
"""The zoo's testing kit on everything this plugin registers, and its variant trained for real."""

import pytest

import $package
from zoo_core.kit import testing
from zoo_core.plugin_api.manager import PluginInfo, get_plugins


@pytest.fixture(scope="module")
def plugins():
    """The zoo's plugins, with this one added when it is not installed."""
    plugins = get_plugins()
    if "$name" not in plugins.plugins:
        plugins.add_plugin($package, PluginInfo("$name", "$distribution", "0.1.0", builtin=False))
    return plugins


def test_every_registered_part_passes_the_kit(plugins):
    assert plugins.plugins["$name"].errors == []
    failed = [r for r in testing.check_plugin("$name", plugins=plugins) if not r.passed]
    assert failed == []


def test_the_encoding_keeps_the_contracts_in_a_transformer(plugins):
    build = testing.tiny_transformer_builder(plugins, positions="$name", block="$name-block")
    testing.assert_causal(build())
    testing.assert_kv_cache_matches_uncached(build())
    testing.assert_checkpoint_round_trip(build)
    testing.assert_deterministic(build)


def test_the_variant_trains_through_zoo_train(plugins, tmp_path):
    from zoo_core.training import TrainingJob
    from zoo_core.training.run import train_variant

    card, registry = train_variant(TrainingJob(variant="$name-tiny", steps=4, out=tmp_path, quiet=True))
    assert card.recipe.kind == "$name-trainer" and card.metrics.validation_loss is not None
    assert (tmp_path / "$name-tiny.safetensors").exists() and registry == tmp_path / "registry.toml"
'''

_README = """\
# $distribution

A plugin for the zoo. It uses every hook: the position encoding `$name`, the
block `$name-block`, the tokenizer `$name-bytes`, the architecture `$name-lm`,
the trainer `$name-trainer`, the adapter `$name-head-delta`, the dataset
`$name-sonnets` (`$package/data/sonnets.txt`, registered by name with its
sha256) and the variant `$name-tiny`, trained on that dataset by name (its card
and, once trained, its checkpoint live in `$package/variants/`). Delete what
you do not need.

    pip install .                          # or `pip install -e .`; the zoo finds it through the `zoo` entry point
    zoo plugins                            # shows: $name 0.1.0 ($distribution)
    zoo check-plugin $name                 # the zoo's testing kit on every part
    zoo train $name-tiny --publish --registry $package/variants/registry.toml
                                           # in this folder: trains the variant into the package
    pip install .                          # ships the weights with the package (an editable install has them already)
    zoo sample $name-tiny --prompt "Shall I"
    pytest                                 # its tests (they use zoo_core.kit.testing)

`python -m build` makes the wheel to publish, weights inside. Fill in
`$package/positions.py` and `$package/parts.py`. See the zoo's
`docs/plugins.md` for every hook and `docs/cards.md` for the card's fields.
"""


def plugin_names(name: str) -> dict[str, str]:
    """The names derived from NAME: entry point, distribution, package, class."""
    if not _NAME.match(name):
        raise ZooError(
            f"'{name}' is not a plugin name: use lowercase letters, digits and single hyphens, starting with a letter (e.g. 'cope')"
        )
    package = "zoo_" + name.replace("-", "_")
    return {
        "name": name,
        "distribution": "zoo-" + name,
        "package": package,
        "cls": "".join(part.capitalize() for part in name.split("-")) + "Positions",
        "blockcls": "".join(part.capitalize() for part in name.split("-")) + "Block",
        "trainercls": "".join(part.capitalize() for part in name.split("-")) + "Trainer",
        "corpus_sha256": hashlib.sha256(_CORPUS.encode("utf-8")).hexdigest(),
    }


def _check_name_is_free(name: str) -> None:
    # A plugin whose entry-point or position name is taken would load but be
    # shadowed or conflict; better to say so before writing anything.

    plugins = get_plugins()
    if name in plugins.plugins:
        raise ZooError(
            f"a plugin named '{name}' is already installed ({plugins.plugins[name].distribution}); choose another name"
        )
    positions = plugins.components["positions"]
    if name in positions.names():
        raise ZooError(
            f"position '{name}' is already registered by plugin '{positions.plugin_of(name)}'; choose another name"
        )


def write_plugin_skeleton(name: str, directory: Path | None = None) -> tuple[Path, list[Path]]:
    """Write the skeleton into ``directory`` (default ./zoo-NAME); return it and the files."""
    names = plugin_names(name)
    _check_name_is_free(name)
    directory = directory if directory is not None else Path(names["distribution"])
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ZooError(f"{directory}: already exists and is not an empty directory; choose another --dir")
    files = {
        Path("pyproject.toml"): _PYPROJECT,
        Path("README.md"): _README,
        Path(names["package"]) / "__init__.py": _INIT,
        Path(names["package"]) / "positions.py": _POSITIONS,
        Path(names["package"]) / "parts.py": _PARTS,
        Path(names["package"]) / "variants" / "registry.toml": _REGISTRY,
        Path(names["package"]) / "data" / "sonnets.txt": _CORPUS,
        Path("tests") / f"test_{names['package']}.py": _TEST,
    }
    written = []
    try:
        for relative, template in files.items():
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(Template(template).substitute(names), encoding="utf-8")
            written.append(path)
    except OSError as exc:
        raise ZooError(f"{directory}: cannot write the plugin: {describe_os_error(exc)}") from None
    return directory, written
