"""The user's own catalogue: variants imported (or published) on this machine.

It lives in ``$ZOO_HOME`` (default ``$XDG_DATA_HOME/zoo``, i.e.
``~/.local/share/zoo``): one ``registry.toml`` beside a ``checkpoints/`` folder,
read after every plugin's catalogue. A name lives in one layer only, so a user
variant cannot shadow a built-in one. Reading it needs no torch.

Issue 10 builds the full layered catalogue; everything that touches the user's
layer goes through `zoo_home`, `user_registry_file` and `add_user_variant`, so
the two can be reconciled in one place.
"""

from __future__ import annotations

import os
from pathlib import Path

from .cards import ModelCard
from .errors import ZooError
from .files import atomic_copy, exclusive_lock
from .registry import upsert_registry_entry

USER_PLUGIN = "user"  # how the user's layer is named in errors and `zoo show`


def zoo_home() -> Path:
    explicit = os.environ.get("ZOO_HOME")
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "zoo"


def user_registry_file() -> Path:
    return zoo_home() / "registry.toml"


def user_variant_files() -> list[tuple[Path, str]]:
    """The user's registry as a (path, layer name) pair, like a plugin's, when it exists."""
    path = user_registry_file()
    return [(path, USER_PLUGIN)] if path.exists() else []


def add_user_variant(card: ModelCard, tensors: dict, tokenizer_file: Path | None = None) -> Path:
    """Write ``tensors`` as the card's safetensors checkpoint in the user's
    catalogue, copy the tokenizer file beside it, and add (or replace) the card
    in the user's registry. The card's paths are rewritten relative to that
    registry; its checksum is the written file's. Returns the registry file."""
    from .checkpoints import save_checkpoint

    home = zoo_home()
    folder = home / "checkpoints"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ZooError(f"{home}: cannot write the user catalogue ($ZOO_HOME): {exc.strerror or exc}") from None
    registry = user_registry_file()
    card = card.model_copy(deep=True)
    if tokenizer_file is not None:
        target = folder / f"{card.name}.tokenizer{''.join(tokenizer_file.suffixes[-1:])}"
        atomic_copy(tokenizer_file, target)
        card.tokenizer.file = str(target.relative_to(home))
    checkpoint = folder / f"{card.name}.safetensors"
    card.checkpoint.path = str(checkpoint.relative_to(home))
    card.checkpoint.sha256 = None
    with exclusive_lock(registry):
        card.checkpoint.sha256 = save_checkpoint(checkpoint, tensors, card.header_json())
        upsert_registry_entry(registry, card)
    return registry

