"""Writing into the user's own catalogue: variants imported on this machine.

It lives in ``$ZOO_HOME`` (zoo_core.storage.locations): one ``registry.toml`` beside a
``checkpoints/`` folder, read as the ``user`` layer (zoo_core.catalogue.layers).
A name lives in one layer only, so a user variant cannot shadow a built-in one.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ZooError
from ..storage.files import atomic_copy, describe_os_error, exclusive_lock
from ..storage.locations import user_registry_path, zoo_home
from .cards import ModelCard
from .registry import upsert_registry_entry

USER_PLUGIN = "user"  # how the user's layer is named in errors and `zoo show`


def add_user_variant(card: ModelCard, tensors: dict, tokenizer_file: Path | None = None) -> Path:
    """Write ``tensors`` as the card's safetensors checkpoint in the user's
    catalogue, copy the tokenizer file beside it, and add (or replace) the card
    in the user's registry. The card's paths are rewritten relative to that
    registry; its checksum is the written file's. Returns the registry file."""
    from ..storage.checkpoints import save_checkpoint

    home = zoo_home()
    folder = home / "checkpoints"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ZooError(f"{home}: cannot write the user catalogue ($ZOO_HOME): {describe_os_error(exc)}") from None
    registry = user_registry_path()
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
