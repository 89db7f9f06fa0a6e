"""What the zoo keeps in its cache folder (``$ZOO_CACHE``, else
``$XDG_CACHE_HOME/zoo``, else ``~/.cache/zoo``), and `zoo cache clear`.

Everything there is derived from files elsewhere and made again when needed,
so clearing it costs time, never data. Each part says what it holds:
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import NamedTuple

from ..errors import ZooError
from .files import describe_os_error, lock_at, try_write_lock
from .locations import cache_dir


class CachePart(NamedTuple):
    folder: str  # inside the cache folder
    holds: str  # what it holds, and when it is made again
    only_with_all: bool = False  # kept by a plain `zoo cache clear`


CACHE_PARTS = (
    CachePart("cards", "cards validated from registry files and checkpoint headers (validated again at the next read)"),
    CachePart("verified", "checkpoints that passed every check, by file identity (checked in full at the next load)"),
    CachePart("gallery", "the gallery's measurements: samples, attention maps, scores (made again by `zoo gallery`)"),
    CachePart("site", "the gallery `zoo serve` serves without --site (written again when it starts)"),
    CachePart("archives", "variants packed for `zoo serve`'s remote catalogue (packed again when asked for)"),
    CachePart("downloads", "archives pulled from remotes, kept to resume or reuse (downloaded again)", True),
    CachePart("locks", "the lock files of files being written (those in use are kept)", True),
)


class Cleared(NamedTuple):
    part: CachePart
    files: int
    size: int


def _files(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file() or path.is_symlink()] if folder.is_dir() else []


def _remove_unheld_locks(folder: Path) -> list[Path]:
    """Delete the lock files no process holds now; a held one stays (its writer
    is running). A process may open a lock between the test and the unlink;
    then it locks a file no one else will open, which only costs exclusion
    for that one write, as with a lock folder wiped by hand."""
    removed = []
    for path in _files(folder):
        try:
            lock = lock_at(path)
        except OSError:
            lock = None
        try:  # a file that is not a lock, no process holds
            unheld = lock is None or try_write_lock(lock, wait=False)
        except OSError:
            unheld = True
        if unheld:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
        if lock is not None:
            lock.release(force=True)
            lock.close()
    return removed


def clear_cache(everything: bool = False) -> list[Cleared]:
    """Empty the cache folder's parts (``everything``: the downloads and unheld
    locks too, and the folder itself once empty); returns what each part held."""
    root = cache_dir()
    cleared = []
    for part in CACHE_PARTS:
        if part.only_with_all and not everything:
            continue
        folder = root / part.folder
        files = _files(folder)
        size = sum(path.stat().st_size for path in files if path.is_file())
        try:
            if part.folder == "locks":
                files = _remove_unheld_locks(folder)
                if not any(folder.iterdir()):
                    folder.rmdir()
            elif folder.exists():
                shutil.rmtree(folder)
        except OSError as exc:
            raise ZooError(f"{folder}: cannot clear the cache: {describe_os_error(exc)}") from None
        cleared.append(Cleared(part, len(files), size))
    if everything and root.is_dir():
        try:
            root.rmdir()  # only when empty: files of others are never the zoo's to delete
        except OSError:
            pass
    return cleared
