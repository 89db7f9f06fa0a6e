"""`zoo new-plugin NAME`: the skeleton of a third-party plugin package.

What it writes installs as it is (``pip install -e DIR``) and shows up in
`zoo plugins`: a package with one hook that registers a position encoding named
after the plugin, the encoding as a do-nothing stub to fill in, a test, and a
``pyproject.toml`` whose ``zoo`` entry point is the whole integration.
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

from .errors import ZooError

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
description = "A zoo plugin: the '$name' position encoding"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["zoo"]

# The zoo finds its plugins through this entry-point group.
[project.entry-points.zoo]
$name = "$package"

[tool.setuptools]
packages = ["$package"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]
"""

_INIT = '''\
"""$distribution: a plugin for the zoo.

Each function below implements one hook of ``zoo_core.hookspecs``. Factories are
given as "module:attribute" strings so that `zoo list` does not import torch.
"""

from zoo_core import hookimpl

__version__ = "0.1.0"


@hookimpl
def register_positions(register):
    register("$name", "$package.positions:$cls")
'''

_POSITIONS = '''\
"""The '$name' position encoding."""

from __future__ import annotations

import torch

from zoo_core.components import PositionEncodingBase


class $cls(PositionEncodingBase):
    """A stub: as generated it tells the model nothing about positions.

    Override the method your encoding needs and delete the others:
    ``embed`` adds to the residual stream (B, T, C) before the first block,
    ``rotate`` turns queries and keys (B, H, T, D) inside attention (as RoPE),
    ``bias`` returns an (H, Tq, Tk) tensor added to attention scores (as ALiBi).
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

_TEST = '''\
"""The plugin registers its encoding, and a zoo transformer runs with it."""

import torch

import $package
from zoo_core.plugin_manager import PluginInfo, PluginSet


def plugin_set() -> PluginSet:
    """The zoo's plugins, with this one added when it is not installed."""
    plugins = PluginSet()
    plugins.load_entry_points()
    if "$name" not in plugins.plugins:
        plugins.add_plugin($package, PluginInfo("$name", "$distribution", "0.1.0", builtin=False))
    return plugins


def test_registers_the_encoding_without_errors():
    plugins = plugin_set()
    assert plugins.plugins["$name"].errors == []
    assert plugins.components["positions"].plugin_of("$name") == "$name"


def test_a_transformer_runs_with_it():
    plugins = plugin_set()
    config = dict(vocab_size=50, context_length=16, d_model=16, n_layer=2, n_head=2, positions="$name")
    model = plugins.components["models"].create("transformer", config, plugins.components)
    idx = torch.randint(0, 50, (3, 10))
    logits, loss = model(idx, targets=idx)
    assert logits.shape == (3, 10, 50)
    assert torch.isfinite(loss)
'''

_README = """\
# $distribution

A plugin for the zoo that registers the position encoding `$name`.

    pip install -e .          # the zoo finds it through the `zoo` entry point
    zoo plugins               # shows: $name 0.1.0 ($distribution)
    pytest                    # its tests

Fill in `$package/positions.py`; a variant uses it with `positions = "$name"`
in its card's `config` table. See the zoo's `docs/plugins.md` for every hook.
"""


def plugin_names(name: str) -> dict[str, str]:
    """The names derived from NAME: entry point, distribution, package, class."""
    if not _NAME.match(name):
        raise ZooError(f"'{name}' is not a plugin name: use lowercase letters, digits and single hyphens, starting with a letter (e.g. 'cope')")
    package = "zoo_" + name.replace("-", "_")
    return {
        "name": name,
        "distribution": "zoo-" + name,
        "package": package,
        "cls": "".join(part.capitalize() for part in name.split("-")) + "Positions",
    }


def _check_name_is_free(name: str) -> None:
    # A plugin whose entry-point or position name is taken would load but be
    # shadowed or conflict; better to say so before writing anything.
    from .plugin_manager import get_plugins

    plugins = get_plugins()
    if name in plugins.plugins:
        raise ZooError(f"a plugin named '{name}' is already installed ({plugins.plugins[name].distribution}); choose another name")
    positions = plugins.components["positions"]
    if name in positions.names():
        raise ZooError(f"position '{name}' is already registered by plugin '{positions.plugin_of(name)}'; choose another name")


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
        raise ZooError(f"{directory}: cannot write the plugin: {exc.strerror or exc}") from None
    return directory, written
