"""Writing into the user's own catalogue: variants imported on this machine.

It lives in ``$ZOO_HOME`` (zoo_core.storage.locations): one ``registry.toml`` beside a
``checkpoints/`` folder, read as the ``user`` layer (zoo_core.catalogue.layers).
A name lives in one layer only, so a user variant cannot shadow a built-in one.
"""

from __future__ import annotations

from pathlib import Path

from ..catalogue.cards import ModelCard
from ..catalogue.publishing import content_named_tokenizer, publish_card
from ..errors import ZooError
from .checkpoints import save_checkpoint, sha256_file
from .files import atomic_copy, content_named, describe_os_error, exclusive_lock
from .locations import user_registry_path, zoo_home

USER_PLUGIN = "user"  # how the user's layer is named in errors and `zoo show`


def add_user_variant(
    card: ModelCard, tensors: dict, tokenizer_file: Path | None = None, metadata: dict[str, str] | None = None
) -> Path:
    """Write ``tensors`` as the card's safetensors checkpoint in the user's
    catalogue, copy the tokenizer file beside it, and add (or replace) the card
    in the user's registry, in the order that no crash can break
    (zoo_core.catalogue.publishing). The card's paths are rewritten relative to
    that registry; its checksums are the written files'. Returns the registry file."""
    home = zoo_home()
    folder = home / "checkpoints"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ZooError(f"{home}: cannot write the user catalogue ($ZOO_HOME): {describe_os_error(exc)}") from None
    registry = user_registry_path()
    staged, settled = card.model_copy(deep=True), card.model_copy(deep=True)
    checkpoint = folder / f"{card.name}.safetensors"
    with exclusive_lock(registry):
        moves = {}
        if tokenizer_file is not None:
            sha = sha256_file(tokenizer_file, "tokenizer file")
            copy = content_named_tokenizer(folder, card.name, tokenizer_file, sha)
            atomic_copy(tokenizer_file, copy)
            moves[copy] = folder / f"{card.name}.tokenizer{''.join(tokenizer_file.suffixes[-1:])}"
            for written, path in ((staged, copy), (settled, moves[copy])):
                written.tokenizer.file, written.tokenizer.sha256 = str(path.relative_to(home)), sha
        sha = save_checkpoint(checkpoint, tensors, staged.header_json(), by_content=True, metadata=metadata)
        moves[content_named(checkpoint, sha)] = checkpoint
        for written, path in ((staged, content_named(checkpoint, sha)), (settled, checkpoint)):
            written.checkpoint.path, written.checkpoint.sha256 = str(path.relative_to(home)), sha
        publish_card(registry, staged, settled, moves)
    return registry
