"""Datasets by name: a text file, its sha256 and the rule that splits it.

Plugins contribute datasets through the ``register_datasets`` hook; the zoo's own
corpus, ``tinyshakespeare``, is registered by the built-in catalogue plugin. The
user adds datasets of their own (a file, a folder of files or a glob pattern)
with `zoo datasets add`; they live in ``$ZOO_HOME/datasets.toml``
(`zoo_core.corpus.user_datasets`). A recipe names its dataset
(``data = "tinyshakespeare"``), so a card keeps working wherever the package that
ships the file is installed. A recipe may instead hold a path
(``zoo train --data PATH`` records the file's absolute path and its sha256): a
path is read relative to the registry file that declares the card.

Every command that reads text resolves it here and checks its sha256 first: a
loss measured on other text than the card says is not the card's loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UnknownName, ZooError
from .text_files import DATASET_NAME, USER, Dataset, check_enough_text, read_text_bytes, sha256_bytes
from .user_datasets import changed_message, read_source, read_user_datasets


@dataclass(frozen=True)
class ResolvedText:
    """The text a command reads, and what to record about it in a card."""

    text: str
    name: str  # a registered dataset's name, or the file's absolute path
    sha256: str
    path: Path


class Datasets:
    """Registered datasets by name: the plugins' and the user's own.

    A name two plugins claim is unusable, naming both. The user's datasets are
    read from ``$ZOO_HOME/datasets.toml`` each time a name is looked up (never
    when the plugins load, so a damaged file stops only the commands that read
    text). A plugin's dataset wins over a user dataset of the same name, which is
    then shadowed (`zoo datasets` says so): a card that names a plugin's dataset
    keeps meaning the text that plugin ships. `zoo datasets add` refuses a taken
    name, so a user dataset is shadowed only by a plugin installed after it.
    """

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

    def _user_datasets(self) -> dict[str, Dataset]:
        return read_user_datasets()

    def _usable_user_datasets(self) -> dict[str, Dataset]:
        return {name: d for name, d in self._user_datasets().items() if name not in self.plugin_names()}

    def __iter__(self):
        usable = {**self._usable_user_datasets(), **self._datasets}
        return iter(sorted(usable.values(), key=lambda d: d.name))

    def __contains__(self, name: str) -> bool:
        if name in self._datasets or name in self._conflicts:
            return True
        # A path ('data/x.txt') is never a name: no need to read the user's file for it.
        return isinstance(name, str) and DATASET_NAME.fullmatch(name) is not None and name in self._user_datasets()

    def conflicts(self) -> dict[str, list[str]]:
        """Names two or more plugins registered, with those plugins."""
        return dict(self._conflicts)

    def plugin_names(self) -> set[str]:
        """The names plugins hold, conflicting ones included."""
        return {*self._datasets, *self._conflicts}

    def plugin_owners(self, name: str) -> list[str]:
        """The plugins that registered ``name`` (none for a user dataset or an unknown name)."""
        if name in self._conflicts:
            return list(self._conflicts[name])
        return [self._datasets[name].plugin] if name in self._datasets else []

    def shadowed(self) -> list[Dataset]:
        """The user's datasets whose names a plugin holds, and which are therefore unused."""
        held = self.plugin_names()
        return [d for name, d in sorted(self._user_datasets().items()) if name in held]

    def get(self, name: str) -> Dataset:
        if name in self._conflicts:
            owners = " and ".join(f"'{p}'" for p in self._conflicts[name])
            raise ZooError(
                f"dataset '{name}' is registered by more than one plugin ({owners}); uninstall or disable one"
            )
        if name in self._datasets:
            return self._datasets[name]
        mine = self._usable_user_datasets()
        if name in mine:
            return mine[name]
        known = ", ".join(sorted({*self._datasets, *mine})) or "none"
        raise UnknownName(f"no dataset named '{name}' is registered (known: {known}; see `zoo datasets`)")


def _read_text(path: Path, what: str) -> tuple[str, str]:
    raw, text = read_text_bytes(path, what)
    check_enough_text(text, path, what)
    return text, sha256_bytes(raw)


def read_dataset(dataset: Dataset) -> ResolvedText:
    """The dataset's text, checked against its sha256. A user dataset's files are
    found again first (a folder's or a glob's may have changed since it was added)."""
    if dataset.plugin != USER:
        text, actual = _read_text(dataset.path, f"dataset '{dataset.name}'")
        if actual != dataset.sha256:
            raise ZooError(
                f"{dataset.path}: sha256 {actual[:16]}… does not match dataset '{dataset.name}' as registered by "
                f"plugin '{dataset.plugin}' ({dataset.sha256[:16]}…): the file was changed or replaced"
            )
        return ResolvedText(text, dataset.name, actual, dataset.path)

    source = read_source(dataset.kind, str(dataset.path), f"dataset '{dataset.name}'")
    if source.sha256 != dataset.sha256:
        raise ZooError(changed_message(dataset, source.sha256))
    check_enough_text(source.text, dataset.path, f"dataset '{dataset.name}'")
    return ResolvedText(source.text, dataset.name, source.sha256, dataset.path)


def read_text_file(path: Path) -> ResolvedText:
    """Any text file the user names (``--data PATH``): recorded by absolute path and sha256."""
    path = Path(path).expanduser().resolve()
    text, actual = _read_text(path, "corpus")
    return ResolvedText(text, str(path), actual, path)


def resolve_named_or_path(value: Path | str, datasets: Datasets) -> ResolvedText:
    """A registered dataset name, else a path to a text file.

    ``--data`` hands a path: an existing file is read, as it always was; a bare
    word that names no file is looked up as a dataset (``--data notes``, also
    where ``notes`` is the folder the dataset was added from).
    """
    if isinstance(value, str) and value in datasets:
        return read_dataset(datasets.get(value))
    path = Path(value)
    if len(path.parts) == 1 and not path.is_file():
        if str(path) in datasets:
            return read_dataset(datasets.get(str(path)))
        if not path.exists():
            raise ZooError(
                f"{path.resolve()}: corpus not found, and no dataset named '{path}' is registered (see `zoo datasets`)"
            )
    return read_text_file(path)
