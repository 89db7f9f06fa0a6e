"""Commands the zoo suggests in its messages, built so that each one runs.

A suggestion is tested by running it (tests/test_suggestions.py): `zoo train
NAME --publish` was once suggested for a shipped variant without weights, and
publishing refuses a name the built-in catalogue already holds.
"""

from __future__ import annotations

import shlex

from ..storage.locations import user_registry_path
from .registry import Variant


def train_command(variant: Variant) -> str:
    """The `zoo train` command that gives ``variant`` (or a copy of it) weights,
    and what it makes: the user's own variants are retrained where they are
    declared; any other is trained into the user's catalogue under a new name,
    since publishing never writes into the built-in or a plugin's catalogue."""
    name = variant.name
    if variant.layer == "user" or variant.source == user_registry_path().expanduser().resolve():
        return f"`zoo train {name} --publish` makes them"
    if variant.layer == "extra":
        return f"`zoo train {name} --publish --registry {shlex.quote(str(variant.source))}` makes them"
    return f"`zoo train {name} --publish --name my-{name}` trains them into your catalogue, as my-{name}"
