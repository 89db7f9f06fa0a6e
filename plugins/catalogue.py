"""The zoo's own variants and corpus: `registry.toml`, `checkpoints/` and `data/`.

In a checkout (and an editable install) they lie at the top of the repository,
beside this package's folder; a wheel carries copies in ``zoo_plugins/shipped/``
(see pyproject.toml). This plugin finds whichever is there, so the rest of the zoo
never needs to know how it was installed.

`ZOO_BUILTIN_REGISTRY=FILE` replaces the built-in registry file. It exists for
tests, which work on a copy they may break; users add catalogues with
`ZOO_REGISTRY` or `--registry` instead, which stack on top of this one.
"""

import os
from pathlib import Path

from zoo_core import hookimpl

PACKAGE = Path(__file__).resolve().parent
SHIPPED = PACKAGE / "shipped"  # present only in a built wheel


def builtin_root() -> Path:
    """The folder holding registry.toml, checkpoints/ and data/."""
    return SHIPPED if (SHIPPED / "registry.toml").is_file() else PACKAGE.parent


def builtin_registry_path() -> Path:
    return Path(os.environ.get("ZOO_BUILTIN_REGISTRY") or builtin_root() / "registry.toml")


# The corpus of seeds 000 and 004, declared with its checksum here rather than
# read from the .sha256 file beside it: a replaced pair of files must not pass.
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


@hookimpl
def register_variants(register):
    register(builtin_registry_path())


@hookimpl
def register_datasets(register):
    register(
        "tinyshakespeare",
        builtin_root() / "data" / "tinyshakespeare.txt",
        sha256=TINYSHAKESPEARE_SHA256,
        train_fraction=0.9,
        description="Tiny Shakespeare (Karpathy's char-rnn corpus), 1,115,394 characters; "
        "the first 90% of the characters train, the rest validate",
    )
