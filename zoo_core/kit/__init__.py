"""The plugin author's kit: the one module a plugin imports from. It re-exports
what docs/plugins.md names (the hook marker, the protocols a component satisfies,
the base classes, the plugin manager's records, the trainer's pieces, hook
points, family records), and holds the conformance tests a plugin runs against
its own components (``testing``) and the skeleton `zoo plugins new` writes
(``scaffold``). It sits beside the command line, above everything it exercises.

Every name resolves on first use, from the module that defines it: a plugin's
``from zoo_core.kit import hookimpl`` at registration costs no more than
``from zoo_core import hookimpl`` (no torch), and a name is the very object
of its home module, so ``isinstance`` and monkeypatches agree either way."""

from __future__ import annotations

import importlib
from typing import Any

# Each public name, and the module that defines it.
EXPORTS: dict[str, str] = {
    # registering: the hook marker, the hook specifications, the one error every refusal raises
    "hookimpl": "zoo_core",
    "hookspecs": "zoo_core.plugin_api",
    "ZooError": "zoo_core.errors",
    # what a component satisfies, and the base classes that satisfy it
    **dict.fromkeys(
        (
            "Adapter",
            "Block",
            "LanguageModel",
            "PositionEncoding",
            "TaskModel",
            "Tokenizer",
            "TokenizerSpecView",
            "Trainer",
            "implements",
        ),
        "zoo_core.plugin_api.protocols",
    ),
    "PositionEncodingBase": "zoo_core.plugin_api.components",
    "FamilyRecord": "zoo_core.plugin_api.families",
    # the plugin manager: what is installed, and building registered parts by name
    **dict.fromkeys(("Components", "PluginInfo", "PluginSet", "get_plugins"), "zoo_core.plugin_api.manager"),
    # hook points (activations a block exposes)
    **dict.fromkeys(("HookPoint", "hooks"), "zoo_core.plugin_api.hook_points"),
    # trainers
    **dict.fromkeys(("StandardTrainer", "TrainingJob", "training_step"), "zoo_core.training"),
    "train_variant": "zoo_core.training.run",
    # what a plugin's own tests and code call
    "load": "zoo_core.loading.api",
    "measure_on_meta": "zoo_core.loading.sizing",
    "sample_tokens": "zoo_core.inference.sampling",
    "TrainedTokenizer": "zoo_core.corpus.tokenizer_training",
    # the conformance tests and the skeleton (modules of this package)
    "testing": "zoo_core.kit",
    "scaffold": "zoo_core.kit",
}

__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    home = EXPORTS.get(name)
    if home is None:
        raise AttributeError(f"module 'zoo_core.kit' has no attribute {name!r}")
    if home == __name__:  # a submodule of the kit itself
        return importlib.import_module(f"{__name__}.{name}")
    module = importlib.import_module(home)
    try:
        return getattr(module, name)
    except AttributeError:  # a submodule its package does not import itself (hookspecs)
        return importlib.import_module(f"{home}.{name}")


def __dir__() -> list[str]:
    return __all__
