"""Import paths of the 0.1 release whose modules have moved, kept for one minor
release: importing one warns (DeprecationWarning, naming the new path) and gives
the very module of the new path, so a plugin's monkeypatch or ``isinstance``
sees one module either way. They go in 0.3; `zoo_core.kit` is the one surface
plugin authors import from (docs/plugins.md)."""

from __future__ import annotations

import importlib
import sys
import warnings

REMOVED_IN = "0.3"


def alias(old: str, new: str) -> None:
    """Make the module being imported as ``old`` the module ``new``, and say so."""
    # stacklevel 3: past this function and the alias module's body to the importing
    # line (the warnings machinery skips importlib's own frames).
    warnings.warn(
        f"{old} moved to {new} (and zoo_core.kit re-exports what plugins use); the old path is removed in {REMOVED_IN}",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)
