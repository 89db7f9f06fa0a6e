"""Datasets by name: a text file, its sha256 and the rule that splits it.

Plugins contribute datasets through the ``register_datasets`` hook; the zoo's own
corpus, ``tinyshakespeare``, is registered by the built-in catalogue plugin. A
recipe names its dataset (``data = "tinyshakespeare"``), so a card keeps working
wherever the package that ships the file is installed. A recipe may instead
hold a path (``zoo train --data PATH`` records the file's absolute path and its
sha256): a path is read relative to the registry file that declares the card.

Every command that reads text resolves it here and checks its sha256 first: a
loss measured on other text than the card says is not the card's loss.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import NamedTuple

from ..errors import UnknownName, ZooError


# A NamedTuple, not a frozen dataclass: defined at every command's start, in a fifth of the time.
class Dataset(NamedTuple):
    """One registered dataset."""

    name: str
    path: Path
    sha256: str
    train_fraction: float  # the split rule: this share of the characters trains, the rest validates
    description: str
    plugin: str


# A NamedTuple, not a frozen dataclass: defined at every command's start, in a fifth of the time.
class ResolvedText(NamedTuple):
    """The text a command reads, and what to record about it in a card."""

    text: str
    name: str  # a registered dataset's name, or the file's absolute path
    sha256: str
    path: Path


class Datasets:
    """Registered datasets by name; a name two plugins claim is unusable, naming both."""

    def __init__(self) -> None:
        self._datasets: dict[str, Dataset] = {}
        self._conflicts: dict[str, list[str]] = {}

    def add(self, dataset: Dataset) -> None:
        if not dataset.name or not isinstance(dataset.name, str):
            raise ZooError(f"plugin '{dataset.plugin}' registered a dataset with an empty or non-text name")
        if not (
            isinstance(dataset.sha256, str)
            and len(dataset.sha256) == 64
            and all(c in "0123456789abcdef" for c in dataset.sha256)
        ):
            raise ZooError(
                f"plugin '{dataset.plugin}' registered dataset '{dataset.name}' without a sha256 (64 lowercase hex digits)"
            )
        if not 0 < dataset.train_fraction < 1:
            raise ZooError(
                f"plugin '{dataset.plugin}' registered dataset '{dataset.name}' with train_fraction {dataset.train_fraction}; it must lie between 0 and 1"
            )
        name = dataset.name
        if name in self._datasets or name in self._conflicts:
            owners = self._conflicts.setdefault(
                name, [self._datasets.pop(name).plugin] if name in self._datasets else []
            )
            owners.append(dataset.plugin)
            return
        self._datasets[name] = dataset

    def __iter__(self):
        return iter(sorted(self._datasets.values(), key=lambda d: d.name))

    def __contains__(self, name: str) -> bool:
        return name in self._datasets or name in self._conflicts

    def conflicts(self) -> dict[str, list[str]]:
        return dict(self._conflicts)

    def get(self, name: str) -> Dataset:
        if name in self._conflicts:
            owners = " and ".join(f"'{p}'" for p in self._conflicts[name])
            raise ZooError(
                f"dataset '{name}' is registered by more than one plugin ({owners}); uninstall or disable one"
            )
        try:
            return self._datasets[name]
        except KeyError:
            known = ", ".join(sorted(self._datasets)) or "none"
            raise UnknownName(f"no dataset named '{name}' is registered (known: {known}; see `zoo datasets`)") from None


def sha256_bytes(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


MAX_TEXT_BYTES = 2 * 1024**3  # the text is held in memory, then tokenised


def _read_text(path: Path, what: str) -> tuple[str, str]:
    from ..storage.files import describe_os_error, read_limited

    try:
        raw = read_limited(path, MAX_TEXT_BYTES, what)  # regular files only, never blocking on a FIFO
    except FileNotFoundError:
        raise ZooError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read {what}: {describe_os_error(exc)}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ZooError(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None
    if len(text) < 100:
        raise ZooError(f"{path}: {what} has only {len(text)} characters; training needs real text")
    return text, sha256_bytes(raw)


def read_dataset(dataset: Dataset) -> ResolvedText:
    text, actual = _read_text(dataset.path, f"dataset '{dataset.name}'")
    if actual != dataset.sha256:
        raise ZooError(
            f"{dataset.path}: sha256 {actual[:16]}… does not match dataset '{dataset.name}' as registered by "
            f"plugin '{dataset.plugin}' ({dataset.sha256[:16]}…): the file was changed or replaced"
        )
    return ResolvedText(text, dataset.name, actual, dataset.path)


def read_text_file(path: Path) -> ResolvedText:
    """Any text file the user names (``--data PATH``): recorded by absolute path and sha256."""
    path = Path(path).expanduser().resolve()
    text, actual = _read_text(path, "corpus")
    return ResolvedText(text, str(path), actual, path)


def resolve_recipe_text(
    recipe,
    registry_file: Path,
    datasets: Datasets,
    override: Path | str | None = None,
    allow_outside: bool = False,
) -> ResolvedText:
    """The text a card's recipe was trained on, checked against its recorded sha256;
    ``override`` (``--data PATH`` or ``--dataset NAME``) replaces it unchecked
    against the card, since the user chose other text on purpose. A path in the
    recipe stays inside the registry's folder unless the card opted out
    (``allow_outside``, see zoo_core.catalogue.paths)."""
    if override is not None:
        return resolve_named_or_path(override, datasets)
    if recipe.data in datasets:
        resolved = read_dataset(datasets.get(recipe.data))
    else:
        from ..catalogue.paths import resolve_inside

        path = resolve_inside(Path(registry_file).parent, recipe.data, what="recipe.data", allow_outside=allow_outside)
        if not path.exists() and "/" not in recipe.data and not recipe.data.endswith(".txt"):
            datasets.get(recipe.data)  # a name nobody registers: say so, listing the known ones
        resolved = read_text_file(path)
    expected = getattr(recipe, "data_sha256", None)
    if expected and expected != resolved.sha256:
        raise ZooError(
            f"{resolved.path}: sha256 {resolved.sha256[:16]}… is not that of the text the card was trained on "
            f"({expected[:16]}…); pass --data or --dataset to score on other text deliberately"
        )
    return resolved


def resolve_named_or_path(value: Path | str, datasets: Datasets) -> ResolvedText:
    """A registered dataset name, else a path to a text file."""
    if isinstance(value, str) and value in datasets:
        return read_dataset(datasets.get(value))
    return read_text_file(Path(value))


def variant_text(variant, override: Path | str | None = None) -> ResolvedText:
    """The text ``variant``'s recipe names (checked), or ``override``."""
    from ..plugin_api.manager import get_plugins

    return resolve_recipe_text(
        variant.card.recipe,
        variant.source,
        get_plugins().datasets,
        override,
        allow_outside=variant.card.allow_external_paths,
    )
