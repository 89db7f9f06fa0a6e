"""Publishing a variant so that no crash can break it, old or new.

A card names its checkpoint (the history lies beside it, ``NAME.history.json``)
and its tokenizer file, and records their sha256; `zoo verify` passes only when
they agree. So no file a card names is ever written in place, and the order is:

1. The caller writes the new files under names only their content can have
   (``NAME.<sha12>.safetensors`` with ``NAME.<sha12>.history.json`` beside it,
   ``NAME.tokenizer.<sha12>.json``; `content_named`).
2. `publish_card` switches the registry to a card naming those files: one
   atomic rename of the registry file, the commit point. Before it the old
   variant is whole, after it the new one is.
3. The files are settled under the usual names (``NAME.safetensors``...): each
   a hard link (or copy) renamed over a file that, since step 2, no card names;
   then the registry is switched again, to those names. Shipped and existing
   catalogues keep their layout.
4. Only then is anything deleted: the content-named copies, and what the old
   card named that no card names now.

Publishing onto a name that already has weights in the destination catalogue
is refused (`refuse_overwrite`) unless the command was given ``--replace``; with
it, the order above is what keeps the old weights, card and history until the
new card is committed.

A kill between any two file operations (tests/test_crash_safety.py tries each)
leaves a registry whose every card names files that exist and belong together;
what it may leave besides is files no card names, which the next publish or
remove of that variant deletes (`remove_unnamed`) and everything else ignores.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from ..errors import ZooError
from ..storage.files import place_copy, remove_file, remove_stale_temporaries
from .registry import Variant, read_registry_file, upsert_registry_entry

if TYPE_CHECKING:
    from .cards import ModelCard

HISTORY_SUFFIX = ".history.json"


def history_of(checkpoint: Path) -> Path:
    """The training history that belongs to a checkpoint: named after it, so a
    card that names the checkpoint names its history too."""
    return checkpoint.with_suffix(HISTORY_SUFFIX)


def publish_card(registry: Path, staged: ModelCard, settled: ModelCard, moves: dict[Path, Path]) -> ModelCard:
    """Steps 2 to 4 above. The caller holds the registry's lock and has written
    each key of ``moves`` (a content-named file) that ``staged`` names; ``settled``
    is the same card naming the values (the usual names). Returns the card the
    registry holds at the end: ``settled``, or ``staged`` when settling failed
    (the disk filled up while copying), which is as complete."""
    remove_stale_temporaries(registry)  # of a publish killed while writing it; we hold its lock
    before = _named_files(registry, staged.name) or set()
    try:
        upsert_registry_entry(registry, staged)  # the commit point
    except BaseException as exc:
        removed = [path for path in moves if _real(path) not in before and remove_file(path)]
        if isinstance(exc, ZooError):
            what = "the new files were deleted" if removed else "nothing new was left"
            raise ZooError(f"{exc}; not published: {what}, the catalogue is as it was") from None
        raise
    card = staged
    try:
        for source, target in moves.items():
            if target.suffix == ".safetensors" and not history_of(source).exists():
                # A history left by an earlier run must not pair with these weights.
                remove_file(history_of(target))
            if source != target:
                place_copy(source, target)
        if moves and any(source != target for source, target in moves.items()):
            upsert_registry_entry(registry, settled)
            card = settled
    except ZooError:
        pass  # the content-named files stay the published ones; nothing is lost
    remove_unnamed(registry, staged.name, [*before, *moves, *moves.values()])
    return card


def refuse_overwrite(existing: Variant) -> None:
    """One line refusing to publish over ``existing`` (a variant with weights of
    the catalogue being published into), naming it and how long it was trained."""
    recipe = existing.card.recipe
    if recipe is None:
        trained = "imported"
    else:
        trained = f"trained for {recipe.steps:,} steps" if recipe.kind != "hand-built" else "hand-built"
    raise ZooError(
        f"variant '{existing.name}' already exists in {existing.source} ({trained}); --replace publishes over it "
        "(its weights, card and log stay until the new ones are committed), or choose another name"
    )


def remove_unnamed(registry: Path, name: str, candidates: Iterable[Path]) -> list[Path]:
    """Delete each of ``candidates``, and each content-named file of variant ``name``
    beside them (left by an interrupted publish), that no card of ``registry``
    names now. Only regular files inside the registry's folder are touched: a
    symlink or a file elsewhere is never a leftover of this catalogue."""
    named = _named_files(registry)
    if named is None:  # what the cards name is unknown: nothing may go
        return []
    home = Path(os.path.realpath(registry.parent))
    # Content-named files, and the temporary files of any of this variant's
    # writes but its training state's (a run in progress may be writing that).
    leftover = re.compile(
        rf"{re.escape(name)}(\.tokenizer)?\.[0-9a-f]{{12}}\..+|\.{re.escape(name)}\.(?!state\.).+\.tmp"
    )
    found = {_real(path) for path in candidates}
    for folder in {path.parent for path in found}:
        try:
            found.update(_real(path) for path in folder.iterdir() if leftover.fullmatch(path.name))
        except OSError:
            continue
    deleted = []
    for path in sorted(found):
        if path in named or home not in path.parents or path.is_symlink() or not path.is_file():
            continue
        try:
            if remove_file(path):
                deleted.append(path)
        except ZooError:  # garbage that stays is harmless; the publish itself is done
            continue
    return deleted


def content_named_tokenizer(folder: Path, name: str, source: Path, sha256: str) -> Path:
    """Where a variant's own copy of a tokenizer of these contents is written
    before it is settled as ``NAME.tokenizer.EXT`` (see the module's step 1)."""
    return folder / f"{name}.tokenizer.{sha256[:12]}{''.join(source.suffixes[-1:])}"


def _named_files(registry: Path, only: str | None = None) -> set[Path] | None:
    """The files the cards of ``registry`` (or its card ``only``) name: checkpoint,
    history, tokenizer; none when it does not exist, None when it cannot be read."""
    if not registry.exists():
        return set()
    try:
        variants = read_registry_file(registry, "-", layer="user")
    except ZooError:
        return None
    named = set()
    for variant in variants:
        if only is not None and variant.name != only:
            continue
        for path in _card_files(variant):
            named.add(path)
    return named


def _card_files(variant) -> list[Path]:
    files = []
    try:
        checkpoint = variant.checkpoint_path
        files += [checkpoint, history_of(checkpoint)]
        if variant.tokenizer_path is not None:
            files.append(variant.tokenizer_path)
    except ZooError:  # a path leading out of the folder: none of this catalogue's files
        pass
    return [_real(path) for path in files]


def _real(path: Path) -> Path:
    """The folder resolved, the name kept: a symlink is itself, not what it points at."""
    return Path(os.path.realpath(path.parent)) / path.name
