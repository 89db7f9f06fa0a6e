"""`zoo remove`: delete a variant of the user's own catalogue, card and files.

Only the user catalogue (``$ZOO_HOME``) is ever changed: built-in variants ship
with the zoo, plugin variants with their package (uninstall it), and extra
registry files are the user's to edit. Files are deleted only when they lie
inside ``$ZOO_HOME``; a tokenizer file is kept while another card still uses it.

A base variant owns what its adapters share with it (an adapter trained from it
names the base's tokenizer file): removing a base that adapters apply to is
refused, naming them, unless they go with it (``with_adapters``), in the same
single registry write, so the catalogue never holds an adapter without its base
and a removed base leaves no file behind that would stop it being installed again.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ZooError
from ..storage.files import atomic_write_text, exclusive_lock
from ..storage.locations import user_registry_path
from .layers import build_catalogue
from .publishing import history_of, remove_unnamed
from .registry import read_registry_file, render_registry


def remove_variant(name: str, with_adapters: bool = False) -> tuple[list[str], list[Path]]:
    """Remove ``name`` (and, ``with_adapters``, the adapters that apply to it)
    from the user catalogue; return the variants removed and the files deleted."""
    registry = user_registry_path()
    with exclusive_lock(registry):
        mine = read_registry_file(registry, "user", layer="user") if registry.exists() else []
        variant = next((v for v in mine if v.name == name), None)
        if variant is None:
            other = build_catalogue().get(name)  # an unknown name is reported with suggestions
            owner = (
                f"plugin '{other.plugin}' (uninstall its package)"
                if other.layer == "plugin"
                else f"the {other.layer} catalogue"
            )
            raise ZooError(
                f"variant '{name}' belongs to {owner}, declared in {other.source}; "
                f"zoo remove deletes only your own variants, in {registry}"
            )
        going = [variant, *_adapters_going(name, mine, with_adapters)]
        remaining = [v for v in mine if v.name not in {g.name for g in going}]
        candidates = {v.name: _own_files(v, registry) for v in going}  # refused here, before anything is deleted
        preamble = _leading_comment(registry)
        # The registry's switch is the commit point: the files go only after it,
        # so a crash leaves either the variants whole or files no card names
        # (which remove_unnamed, here or at the next publish, deletes).
        atomic_write_text(registry, render_registry([v.card for v in remaining], preamble))
        deleted = [path for v in going for path in remove_unnamed(registry, v.name, candidates[v.name])]
        if not remaining:  # the last one: no empty registry file or folder is left behind
            deleted += _remove_empty_catalogue(registry)
        return [v.name for v in going], deleted


def _adapters_going(name: str, mine: list, with_adapters: bool) -> list:
    """The user's adapters of base ``name``, which go with it; refused unless
    ``with_adapters``, or when an adapter of another catalogue (not the user's
    to delete) applies to it."""
    adapters = [v for v in build_catalogue() if v.card.adapter is not None and v.card.adapter.base == name]
    if not adapters:
        return []
    names = ", ".join(f"'{v.name}'" for v in adapters)
    elsewhere = [v for v in adapters if v.layer != "user"]
    if elsewhere:
        raise ZooError(
            f"variant '{name}' is the base of {names}; '{elsewhere[0].name}' belongs to the {elsewhere[0].layer} "
            f"catalogue ({elsewhere[0].source}), which zoo remove does not change: not removed (nothing was deleted)"
        )
    if not with_adapters:
        raise ZooError(
            f"variant '{name}' is the base of the adapter{'s' * (len(adapters) > 1)} {names}, which would be left "
            f"without it: not removed (nothing was deleted); remove them first, or all together with "
            f"`zoo remove {name} --with-adapters`"
        )
    return [v for v in mine if v.name in {a.name for a in adapters}]


def _remove_empty_catalogue(registry: Path) -> list[Path]:
    """Delete the user registry that holds no card now, and the folders of the
    user catalogue left empty (``checkpoints/``, then ``$ZOO_HOME`` itself):
    what `zoo train --publish` creates it creates again."""
    if read_registry_file(registry, "user", layer="user"):
        return []
    registry.unlink(missing_ok=True)
    deleted = [registry]
    for folder in (registry.parent / "checkpoints", registry.parent):
        try:
            folder.rmdir()  # only when empty: anything else there is the user's
            deleted.append(folder)
        except OSError:
            break
    return deleted


def _own_files(variant, registry: Path) -> list[Path]:
    """The files of ``variant`` to delete once no card names them: its checkpoint
    and history (under the names a publish gives them, content-named or not) and
    its tokenizer. A card whose files lead out of its folder through a symlink is
    refused: deleting the link would leave what it points at, deleting that
    would reach outside the catalogue."""
    folder = registry.parent
    try:
        checkpoint, tokenizer = variant.checkpoint_path, variant.tokenizer_path
    except ZooError as exc:
        raise ZooError(f"{exc}; not removed (nothing was deleted): fix or delete the link first") from None
    for relative in (variant.card.checkpoint.path, variant.card.tokenizer.file):
        named = folder / relative if relative else None
        if named is not None and named.is_symlink():
            target = Path(os.path.realpath(named))
            if Path(os.path.realpath(named.parent)) not in target.parents:
                raise ZooError(
                    f"variant '{variant.name}': {named} is a symlink leading out of its folder (to {target}); "
                    f"not removed (nothing was deleted): delete the link or the card by hand"
                )
    own = [checkpoint, history_of(checkpoint)]
    usual = re.sub(r"\.[0-9a-f]{12}\.safetensors$", ".safetensors", checkpoint.name)
    own += [checkpoint.with_name(usual), history_of(checkpoint.with_name(usual))]
    return own + ([tokenizer] if tokenizer is not None else [])


def _leading_comment(path: Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].removeprefix(" "))
    return "\n".join(lines)
