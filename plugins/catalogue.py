"""The project's own variants: `registry.toml` at the top of the repository.

`ZOO_REGISTRY` points the built-in catalogue at another file (used by tests and
by anyone keeping a private catalogue).
"""

import os
from pathlib import Path

from zoo_core import hookimpl

PROJECT_ROOT = Path(__file__).resolve().parent.parent
REGISTRY_PATH = PROJECT_ROOT / "registry.toml"


@hookimpl
def register_variants(register):
    register(os.environ.get("ZOO_REGISTRY") or REGISTRY_PATH)
