"""Commands the zoo suggests in its messages, built so that each one runs.

A suggestion is tested by running it (tests/test_suggestions.py): `zoo train
NAME --publish` was once suggested for a shipped variant without weights, and
publishing refuses a name the built-in catalogue already holds.

A plugin's variant has one path of its own, the same whether the package is
installed editable or not (docs/plugins.md, "Shipping variants and checkpoints"):
from the package's source checkout, `zoo train NAME --publish --registry
PKG/variants/registry.toml` trains it into the package's own registry file and
checkpoint, and reinstalling the package (`pip install .`, or a wheel built with
`python -m build`) ships them.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ..storage.locations import user_registry_path
from .registry import Variant


def registry_in_package(variant: Variant) -> Path:
    """The variant's registry file relative to the folder holding its top-level
    package (``zoo_gru/variants/registry.toml``): the same path in the source
    checkout and in site-packages, whichever way the package is installed."""
    source = variant.source
    top = source.parent
    while (top.parent / "__init__.py").exists():
        top = top.parent
    if not (top / "__init__.py").exists():  # a registry outside any package: named as it is
        return source
    return source.relative_to(top.parent)


def plugin_train_command(variant: Variant) -> str:
    """The command that trains a plugin's variant into its package, run in the package's source checkout."""
    return f"zoo train {variant.name} --publish --registry {shlex.quote(str(registry_in_package(variant)))}"


def plugin_training_advice(variant: Variant) -> str:
    """How a plugin's variant gets weights: into the package (for its author), or into one's own catalogue."""
    return (
        f"in the source checkout of plugin '{variant.plugin}', `{plugin_train_command(variant)}` trains them into "
        f"the package, and reinstalling it (`pip install .`) ships them; or `zoo train {variant.name} --publish "
        f"--name my-{variant.name}` trains a copy into your catalogue"
    )


def train_command(variant: Variant) -> str:
    """The `zoo train` command that gives ``variant`` (or a copy of it) weights,
    and what it makes: the user's own variants are retrained where they are
    declared, a plugin's in its package's source checkout; a built-in one is
    trained into the user's catalogue under a new name, since publishing never
    writes into an installed catalogue."""
    name = variant.name
    if variant.layer == "user" or variant.source == user_registry_path().expanduser().resolve():
        return f"`zoo train {name} --publish` makes them"
    if variant.layer == "extra":
        return f"`zoo train {name} --publish --registry {shlex.quote(str(variant.source))}` makes them"
    if variant.layer == "plugin":
        return plugin_training_advice(variant)
    return f"`zoo train {name} --publish --name my-{name}` trains them into your catalogue, as my-{name}"
