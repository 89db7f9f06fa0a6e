"""Datasets of your own: text registered by name in ``$ZOO_HOME/datasets.toml``.

`zoo datasets add NAME PATH` registers one text file, a folder of text files or
a glob pattern (``'notes/*.md'``). The file records where the text comes from
(the absolute path or pattern, and which of the three it is), its size and its
sha256, never the list of files: that list is found again every time the
dataset is read, so a file edited, added to a folder or deleted from it changes
the sha256, and the dataset is refused until `zoo datasets add NAME PATH
--replace` accepts the new text.

The files, in an order that is the same on every machine:

- a folder: every regular file under it, at any depth, sorted by its path
  relative to the folder written with '/' (compared as text, never by locale);
  files and folders whose names start with '.' are skipped;
- a glob: the regular files ``glob.glob(pattern, recursive=True)`` would match
  (``**`` any folders deep, names starting with '.' only when the pattern says
  so), sorted, except that a symlinked folder is never entered: a link loop
  cannot make the walk endless.

Finding the files is bounded: at most `MAX_SOURCE_FILES` files and
`MAX_WALK_SECONDS` seconds of walking, refused in one line past either.

The text is their bytes in that order, each file UTF-8 on its own, with a
newline added between two files where the first does not end in one, so that
no two files' lines run together. One file alone is its bytes unchanged: its
sha256 is the one `sha256sum` prints and `zoo train --data FILE` records.

Reading this file needs tomllib only (no pydantic, no torch).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shlex
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UnknownName, ZooError, printable
from ..storage.files import atomic_write_text, describe_os_error, exclusive_lock, read_limited, remove_stale_temporaries
from ..storage.locations import user_datasets_path
from ..storage.toml_text import render_toml
from .text_files import DATASET_NAME, MAX_TEXT_BYTES, USER, Dataset, check_enough_text, read_text_bytes

if TYPE_CHECKING:
    from ..plugin_api.manager import PluginSet

KINDS = ("file", "folder", "glob")
MAX_SOURCE_FILES = 100_000  # files of one dataset; a typo such as '/**' finds millions
MAX_WALK_SECONDS = 60.0  # finding them (a network drive, a vast tree)
DEFAULT_TRAIN_FRACTION = 0.9
_MAX_FILE_BYTES = 16 * 1024**2  # datasets.toml: a few lines per dataset
_FIELDS = {"kind", "source", "size", "sha256", "train_fraction", "description", "added"}
_HEADER = (
    "Datasets of your own, by name: `zoo datasets add` and `zoo datasets remove` write this file.\n"
    "The files of each are found again from its source, and checked against its sha256, whenever it is read."
)


@dataclass(frozen=True)
class SourceText:
    """The text of a source's files, combined."""

    text: str
    sha256: str  # of the combined bytes
    size: int  # bytes
    files: list[Path]


# -- the files of a source ----------------------------------------------------------


def locate_source(given: str) -> tuple[str, str]:
    """(kind, absolute source) of what the user typed: an existing folder or file,
    else a glob pattern (a missing path with no wildcard is an error)."""
    expanded = os.path.expanduser(given)
    absolute = os.path.abspath(expanded)
    try:
        absolute.encode("utf-8")
    except UnicodeEncodeError:
        raise ZooError(f"{printable(given)}: the path is not UTF-8; rename it") from None
    if os.path.isdir(absolute):
        return "folder", absolute
    if os.path.lexists(absolute):
        return "file", absolute  # a FIFO or a device is refused when it is read, naming its kind
    if any(character in expanded for character in "*?["):
        return "glob", absolute
    raise ZooError(f"{given}: no such file or folder (a glob pattern needs quotes: 'notes/*.md')")


def source_files(kind: str, source: str) -> list[Path]:
    """The files whose bytes make the text of ``source``, in their fixed order
    (the module's docstring gives it). Zero files is an error."""
    if kind == "file":
        return [Path(source)]
    if kind == "folder":
        files = _folder_files(Path(source))
        if not files:
            raise ZooError(f"{source}: the folder holds no files (names starting with '.' are skipped)")
        return files
    if kind == "glob":
        files = _glob_files(source)
        if not files:
            raise ZooError(f"{source}: the pattern matches no files")
        return files
    raise ValueError(f"unknown kind of dataset source: {kind!r}")


def _folder_files(root: Path) -> list[Path]:
    def refuse(exc: OSError) -> None:  # os.walk would skip an unreadable folder silently
        raise ZooError(f"{exc.filename or root}: cannot read the folder: {describe_os_error(exc)}")

    if not root.is_dir():
        raise ZooError(f"{root}: folder not found")
    found = []
    walk = _Walk(str(root))
    for folder, subfolders, names in os.walk(root, onerror=refuse):  # never into a symlinked folder
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        for name in names:
            path = Path(folder, name)
            if not name.startswith(".") and path.is_file():
                found.append(path)
                walk.count(len(found))
        walk.count(len(found))
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


class _Walk:
    """The bounds of finding a source's files: refused in one line past them."""

    def __init__(self, source: str):
        self.source, self.ends = source, time.monotonic() + MAX_WALK_SECONDS

    def count(self, files: int) -> None:
        if files > MAX_SOURCE_FILES:
            raise ZooError(
                f"{printable(self.source)}: more than {MAX_SOURCE_FILES:,} files; name a narrower folder or pattern"
            )
        if time.monotonic() > self.ends:
            raise ZooError(
                f"{printable(self.source)}: finding its files took more than {MAX_WALK_SECONDS:g} s "
                f"({files:,} found); name a narrower folder or pattern"
            )


def _glob_files(pattern: str) -> list[Path]:
    """The regular files ``pattern`` matches (the module's docstring says how), sorted as paths."""
    parts = pattern.split(os.sep)
    fixed = next(i for i, part in enumerate([*parts, "*"]) if any(c in part for c in "*?["))
    root, wanted = os.sep.join(parts[:fixed]) or os.sep, parts[fixed:]
    segments = [None if part == "**" else re.compile(fnmatch.translate(part)) for part in wanted]
    deepest = None if None in segments else len(segments)
    found: list[str] = []
    walk = _Walk(pattern)
    for folder, subfolders, names in os.walk(root):  # never into a symlinked folder
        relative = os.path.relpath(folder, root).split(os.sep) if folder != root else []
        if deepest is not None and len(relative) + 1 >= deepest:
            subfolders[:] = []  # no match lies deeper
        for name in names:
            if _matches([*relative, name], wanted, segments) and os.path.isfile(os.path.join(folder, name)):
                found.append(os.path.join(folder, name))
        walk.count(len(found))
    return [Path(path) for path in sorted(found)]


def _matches(names: list[str], wanted: list[str], segments: list) -> bool:
    """Whether a path's ``names`` match the pattern's parts, as glob.glob matches:
    ``**`` is any number of folders, and no wildcard matches a leading '.'."""
    if not segments:
        return not names
    if segments[0] is None:
        return _matches(names, wanted[1:], segments[1:]) or bool(
            names and not names[0].startswith(".") and _matches(names[1:], wanted, segments)
        )
    if not names or (names[0].startswith(".") and not wanted[0].startswith(".")):
        return False
    return bool(segments[0].match(names[0])) and _matches(names[1:], wanted[1:], segments[1:])


def combined_text(files: list[Path], what: str) -> SourceText:
    """The files' text, joined by the module docstring's rule; a file that is not
    UTF-8 is refused naming it. The whole is held in memory, so it is refused
    above MAX_TEXT_BYTES before any of it is read."""
    total = sum(path.stat().st_size for path in files if path.is_file())
    if total > MAX_TEXT_BYTES:
        raise ZooError(f"{what}: its {len(files)} files hold {total:,} bytes, more than the {MAX_TEXT_BYTES:,} it may")
    digest = hashlib.sha256()
    pieces: list[str] = []
    size = 0
    ends_line = True
    for path in files:
        raw, text = read_text_bytes(path, f"a file of {what}")
        if not raw:
            continue
        if not ends_line:
            digest.update(b"\n")
            pieces.append("\n")
            size += 1
        digest.update(raw)
        pieces.append(text)
        size += len(raw)
        ends_line = raw.endswith(b"\n")
    return SourceText("".join(pieces), digest.hexdigest(), size, files)


def read_source(kind: str, source: str, what: str) -> SourceText:
    """The text of a source (``what`` names it in errors): its files found again, then combined."""
    return combined_text(source_files(kind, source), what)


def changed_message(dataset: Dataset, found: str) -> str:
    """Why a user dataset whose text no longer matches is refused, and how to accept it."""
    return (
        f"dataset '{dataset.name}' changed since it was added ({dataset.path}): expected sha256 "
        f"{dataset.sha256[:16]}…, found {found[:16]}… (a file was edited, added or removed); to use the new text: "
        f"zoo datasets add {dataset.name} {shlex.quote(str(dataset.path))} --replace"
    )


# -- $ZOO_HOME/datasets.toml ----------------------------------------------------------


def read_user_datasets(path: Path | None = None) -> dict[str, Dataset]:
    """The user's datasets by name, in the file's order; none when there is no file.
    A damaged file is one ZooError line naming it."""
    import tomllib  # here: `zoo list` imports this module (through corpus.datasets) and reads no TOML

    path = path or user_datasets_path()
    try:
        raw = read_limited(path, _MAX_FILE_BYTES, "datasets file")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ZooError(f"{path}: cannot read your datasets file: {describe_os_error(exc)}") from None
    try:
        tables = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ZooError(f"{path}: damaged datasets file: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ZooError(f"{path}: damaged datasets file: {exc}") from None
    return {name: _dataset(path, name, table) for name, table in tables.items()}


def _dataset(path: Path, name: str, table: object) -> Dataset:
    def damaged(problem: str) -> ZooError:
        return ZooError(f"{path}: damaged datasets file: dataset '{printable(name)}': {problem}")

    if not DATASET_NAME.fullmatch(name):
        raise damaged("not a dataset name (lower-case letters, digits, '.' and '-')")
    if not isinstance(table, dict):
        raise damaged("not a table")
    if set(table) != _FIELDS:
        missing, unknown = sorted(_FIELDS - set(table)), sorted(set(table) - _FIELDS)
        raise damaged("; ".join([*(f"no '{k}'" for k in missing), *(f"unknown field '{k}'" for k in unknown)]))
    kind, source, size, sha256 = table["kind"], table["source"], table["size"], table["sha256"]
    fraction, description, added = table["train_fraction"], table["description"], table["added"]
    if kind not in KINDS:
        raise damaged(f"kind must be one of {', '.join(KINDS)}")
    if not isinstance(source, str) or not os.path.isabs(source):
        raise damaged("source must be an absolute path")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise damaged("size must be a whole number of bytes")
    if not (isinstance(sha256, str) and len(sha256) == 64 and all(c in "0123456789abcdef" for c in sha256)):
        raise damaged("sha256 must be 64 lowercase hex digits")
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction < 1:
        raise damaged("train_fraction must lie between 0 and 1")
    if not isinstance(description, str) or not isinstance(added, str):
        raise damaged("description and added must be text")
    return Dataset(name, Path(source), sha256, float(fraction), description, USER, kind, size, added)


def render_user_datasets(datasets: list[Dataset]) -> str:
    """datasets.toml's text: one table per dataset, in the order given."""
    document = {
        d.name: {
            "kind": d.kind,
            "source": str(d.path),
            "size": d.size,
            "sha256": d.sha256,
            "train_fraction": d.train_fraction,
            "description": d.description,
            "added": d.added,
        }
        for d in datasets
    }
    return render_toml(document, _HEADER, quoted_names=True)


def _check_name(name: str) -> None:
    if not DATASET_NAME.fullmatch(name):
        raise ZooError(
            f"dataset name '{printable(name)}': a dataset name is lower-case letters, digits, '.' and '-', "
            "starting with a letter or digit"
        )


def _plugin_owner(name: str, plugins: PluginSet) -> str | None:
    """Who else holds ``name``, in words (the built-in plugin 'catalogue'), or None.
    The caller hands the plugins: the registry sits above the corpus (it holds the
    datasets plugins register), so the corpus never imports it."""
    owners = plugins.datasets.plugin_owners(name)
    if not owners:
        return None
    return " and ".join(
        f"the built-in plugin '{p}'" if p in plugins.plugins and plugins.plugins[p].builtin else f"plugin '{p}'"
        for p in owners
    )


def add_user_dataset(
    name: str,
    given: str,
    description: str | None = None,
    train_fraction: float | None = None,
    replace: bool = False,
    *,
    plugins: PluginSet,
) -> tuple[Dataset, SourceText, bool]:
    """Register the file, folder or glob ``given`` as the user's dataset ``name``;
    returns the dataset, its text and whether it replaced one of the same name
    (whose description and split it keeps unless given anew)."""
    _check_name(name)
    if train_fraction is not None and not 0 < train_fraction < 1:
        raise ZooError(f"--train-fraction {train_fraction}: it must lie between 0 and 1")
    owner = _plugin_owner(name, plugins)
    if owner:
        raise ZooError(f"dataset '{name}' is already registered by {owner}; choose another name")
    kind, source = locate_source(given)
    path = user_datasets_path()
    with exclusive_lock(path):
        mine = read_user_datasets(path)
        old = mine.get(name)
        if old is not None and not replace:
            raise ZooError(
                f"dataset '{name}' is already one of yours ({old.path}); --replace replaces it, or choose another name"
            )
        what = f"dataset '{name}'"
        text = read_source(kind, source, what)
        check_enough_text(text.text, Path(source), what)
        dataset = Dataset(
            name,
            Path(source),
            text.sha256,
            train_fraction if train_fraction is not None else old.train_fraction if old else DEFAULT_TRAIN_FRACTION,
            description if description is not None else old.description if old else "",
            USER,
            kind,
            text.size,
            datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        )
        mine[name] = dataset  # a replaced entry keeps its place in the file
        remove_stale_temporaries(path)
        atomic_write_text(path, render_user_datasets(list(mine.values())))
    return dataset, text, old is not None


def remove_user_dataset(name: str, *, plugins: PluginSet) -> Dataset:
    """Remove the user's dataset ``name`` from datasets.toml (never its files); return it."""
    path = user_datasets_path()
    with exclusive_lock(path):
        mine = read_user_datasets(path)
        if name not in mine:
            owner = _plugin_owner(name, plugins)
            if owner:
                raise ZooError(
                    f"dataset '{name}' belongs to {owner}; zoo datasets remove removes only your own datasets, in {path}"
                )
            yours = ", ".join(mine) or "none"
            raise UnknownName(f"no dataset of yours is named '{printable(name)}' (yours: {yours}; see `zoo datasets`)")
        removed = mine.pop(name)
        remove_stale_temporaries(path)
        atomic_write_text(path, render_user_datasets(list(mine.values())))
    return removed
