"""What the shell completes after an argument or option that takes a name:
variants, datasets, trainers, tokenizers, remotes, run-log kinds, and the
values `zoo list` filters on.

Completion is part of the cold-start front: each completer reads what the
front already reads (registry files and the card cache, the plugins'
registrations, remotes.toml), never torch or pydantic. The parsers attach these
to their arguments and `zoo --help` builds every parser, so what a completer
reads is imported when it completes, not when this module is. A broken
registry or configuration file completes nothing rather than break the user's
shell.
"""

from __future__ import annotations

import argparse
from typing import Callable, Iterable

from ..corpus.user_datasets import read_user_datasets

# The --log-to kinds besides the jsonl log a run always writes; zoo_core.training.run_log
# (which imports torch) holds the whole list, and tests/test_cli_help.py keeps the two together.
LOG_KINDS = ("tensorboard", "mlflow", "csv")

Completer = Callable[..., list[str]]


def _completer(names: Callable[[], Iterable[str]]) -> Completer:
    """An argcomplete completer offering those of ``names()`` that start with the typed prefix."""

    def complete(prefix: str, **_) -> list[str]:
        try:
            return sorted({name for name in names() if name and name.startswith(prefix)})
        except Exception:  # a broken registry or config file must not break the user's shell
            return []

    return complete


def _catalogue_cards() -> list[dict]:
    # here: `zoo --help` builds every parser and reads no catalogue (the plugin manager costs it 30 ms)
    from ..loading.lookup import catalogue

    return [variant.index for variant in catalogue()]


def _plugins():
    from ..plugin_api.manager import get_plugins  # as above: only when a name is completed

    return get_plugins()


def _files(prefix: str, extension: str | None = None) -> list[str]:
    """Files and folders starting with ``prefix`` (only ``*.extension`` files when given), as bash lists them."""
    from argcomplete.completers import FilesCompleter  # a shell is completing: argcomplete is already imported

    return list(FilesCompleter(extension or ())(prefix))


@_completer
def variant_names() -> Iterable[str]:
    return (card["name"] for card in _catalogue_cards())


@_completer
def tags() -> Iterable[str]:
    return (tag for card in _catalogue_cards() for tag in card["tags"])


@_completer
def architectures() -> Iterable[str]:
    return (card["architecture"] for card in _catalogue_cards())


@_completer
def tokenizer_kinds() -> Iterable[str]:
    return _plugins().components["tokenizers"].names()


@_completer
def trainer_names() -> Iterable[str]:
    return _plugins().components["trainers"].names()


@_completer
def dataset_names() -> Iterable[str]:
    return (dataset.name for dataset in _plugins().datasets)


@_completer
def user_dataset_names() -> Iterable[str]:
    """`zoo datasets remove NAME`: the user's own datasets, the only ones it removes."""
    return read_user_datasets()


@_completer
def plugin_names() -> Iterable[str]:
    return _plugins().plugins


def datasets_and_files(prefix: str, **_) -> list[str]:
    """--data NAME|PATH: a registered dataset's name, or a text file."""
    return dataset_names(prefix) + _files(prefix)


def archives(prefix: str, **_) -> list[str]:
    """`zoo install ARCHIVE`: a .zoo file (folders on the way to one)."""
    return _files(prefix, "zoo")


@_completer
def remote_names() -> Iterable[str]:
    from ..sharing.remotes import load_remotes  # reads remotes.toml; tomllib is not the front's to pay for

    return (remote.name for remote in load_remotes())


def remote_prefixes(prefix: str, **_) -> list[str]:
    """`zoo pull REMOTE/VARIANT`: the remotes, each as ``NAME/`` (the variant is the remote's to list)."""
    return [name + "/" for name in remote_names("") if (name + "/").startswith(prefix)]


@_completer
def log_kinds() -> Iterable[str]:
    return LOG_KINDS


@_completer
def nothing() -> Iterable[str]:
    """For a new name (`zoo new-plugin NAME`): there is nothing to complete."""
    return ()


def complete_with(action: argparse.Action, completer: Completer) -> argparse.Action:
    """``action`` (a parser's argument), completed by ``completer``: argcomplete reads the attribute."""
    action.completer = completer  # type: ignore[attr-defined]
    return action
