"""Import paths from before the core was grouped into subpackages keep working.

Plugins and scripts written against ``zoo_core.hookspecs``, ``zoo_core.training``
and the like import the very same module objects from their new homes, so a
monkeypatch or an ``isinstance`` check through either path sees one module. New
code should use the new paths (the right-hand column).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

# The finder and loader follow the import protocols by shape rather than by
# subclassing importlib.abc, whose import (it pulls in importlib.resources) would
# cost every command, `zoo list` included, more than the rest of this package.

# ``zoo_core.training`` and ``zoo_core.evaluation`` are packages now; each re-exports
# what its old module offered (see their __init__), so they need no alias here.
OLD_TO_NEW = {
    "cards": "catalogue.cards",
    "card_cache": "catalogue.card_cache",
    "card_docs": "catalogue.card_docs",
    "registry": "catalogue.registry",
    "catalogue_layers": "catalogue.layers",
    "finding": "catalogue.finding",
    "limits": "catalogue.limits",
    "paths": "catalogue.paths",
    "user_catalogue": "storage.user_catalogue",
    "removal": "catalogue.removal",
    "files": "storage.files",
    "locations": "storage.locations",
    "tensor_files": "storage.tensor_files",
    "checkpoints": "storage.checkpoints",
    "initialisation": "storage.initialisation",
    "verify": "loading.verify",
    "datasets": "corpus.datasets",
    "data": "corpus.batches",
    "tokenizer_training": "corpus.tokenizer_training",
    "model": "inference.model",
    "sampling": "inference.sampling",
    "prompts": "inference.prompts",
    "threads": "inference.threads",
    "trainrun": "training.run",
    "trainstate": "training.state",
    "experiment": "training.studies",
    "distributed": "training.distributed",
    "losses": "training.losses",
    "progress": "training.progress",
    "bits": "evaluation.bits",
    "compare": "evaluation.compare",
    "plots": "evaluation.plots",
    "hookspecs": "plugin_api.hookspecs",
    "protocols": "plugin_api.protocols",
    "components": "plugin_api.components",
    "testing": "kit.testing",
    "scaffold": "kit.scaffold",
    "plugin_manager": "plugin_api.manager",
    "clihelp": "cli.help",
    "tables": "cli.tables",
}


class _Alias:
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        # The import system stores what this returns under the old name, and keeps the
        # module's own __name__ and __spec__: both names give the one module object.
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed under its new name


class _MovedModuleFinder:
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, old = fullname.rpartition(".")
        if package != "zoo_core" or old not in OLD_TO_NEW:
            return None
        loader = cast("Loader", _Alias(f"zoo_core.{OLD_TO_NEW[old]}"))  # a Loader by shape (see above)
        return importlib.machinery.ModuleSpec(fullname, loader)


def install() -> None:
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
