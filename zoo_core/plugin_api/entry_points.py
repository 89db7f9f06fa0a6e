"""The `zoo` entry points of the installed distributions, remembered between runs.

Asking `importlib.metadata` for them means importing it (with the e-mail
package its metadata parsing needs) and reading every installed distribution,
a large share of what `zoo list` would otherwise cost. The answer changes only when a distribution
is installed, upgraded or removed, and each of those adds or removes a
``*.dist-info`` (or ``*.egg-info``) folder inside a folder on `sys.path`, which
changes that folder's modification time: the test Python's own import system
uses to notice new modules. So the answer is kept in the cache folder
(``$ZOO_CACHE/entry-points``, one file per Python environment) beside the
modification time of every `sys.path` folder, and `importlib.metadata` is asked
again whenever the path or one of those times differs.

Two limits, both on the side of asking again rather than answering stale: an
answer is not kept while a `sys.path` folder changed in the last two seconds
(two installs within one tick of the file-system clock would look like one),
and a damaged or unreadable entry is a miss (the entry's format is the card
cache's: `zoo_core.storage.files.read_cache_entry`). A metadata file edited in place,
which no installer does, is not noticed; removing the cache folder forgets
everything.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

GROUP = "zoo"
FORMAT = 1
SETTLED_SECONDS = 2.0  # coarser than any file system's clock (FAT: 2 s): a folder changed since may change again unseen


# A NamedTuple, not a frozen dataclass: defined at every command's start, in a fifth of the time.
class ZooEntryPoint(NamedTuple):
    name: str
    module: str  # what the entry point names, as importlib.metadata splits it: "package.module" ...
    attribute: str  # ... and "object.attribute", or "" for the module itself
    distribution: str  # the distribution's name and version, from its metadata
    version: str

    @property
    def value(self) -> str:
        return f"{self.module}:{self.attribute}" if self.attribute else self.module

    def load(self):
        """The object the entry point names, imported as importlib.metadata.EntryPoint.load does."""
        target = importlib.import_module(self.module)
        for part in self.attribute.split(".") if self.attribute else ():
            target = getattr(target, part)
        return target


def zoo_entry_points() -> list[ZooEntryPoint]:
    """Every entry point in the `zoo` group, in `sys.path` order, as importlib.metadata finds them."""
    folders = _folder_times()
    entry = _entry_file()
    cached = _read(entry, folders)
    if cached is not None:
        return cached
    found = _discover()
    settled = time.time_ns() - int(SETTLED_SECONDS * 1e9)
    if all(mtime is None or mtime < settled for _, mtime in folders):
        _write(entry, folders, found)
    return found


def _folder_times() -> list[tuple[str, int | None]]:
    times: list[tuple[str, int | None]] = []
    for folder in sys.path:
        try:
            folder = folder or os.getcwd()  # "" is the working folder, whichever it is today
            times.append((folder, os.stat(folder).st_mtime_ns))
        except OSError:  # a path entry that does not exist (yet): its appearance changes the key
            times.append((folder, None))
    return times


def _entry_file() -> Path:
    from ..storage.files import cache_file_for

    # sys.prefix, not sys.executable: a virtual environment's python is a link
    # to the same interpreter as every other environment's.
    return cache_file_for(Path(sys.prefix), "entry-points", ".json")


def _discover() -> list[ZooEntryPoint]:
    import importlib.metadata

    described: dict[int, tuple[str, str]] = {}  # by id(): a distribution's entry points share it
    found = []
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = ep.dist
        if dist is None:
            name, version = "?", "?"
        else:
            if id(dist) not in described:  # dist.metadata parses the whole METADATA file each time
                metadata = dist.metadata
                described[id(dist)] = (metadata["Name"], metadata["Version"])
            name, version = described[id(dist)]
        found.append(ZooEntryPoint(ep.name, ep.module, ep.attr or "", name, version))
    return found


def _key(folders) -> str:
    described = {"entry points": FORMAT, "python": sys.version, "folders": [list(pair) for pair in folders]}
    return hashlib.sha256(json.dumps(described).encode("utf-8", "surrogateescape")).hexdigest()


def _read(entry: Path, folders) -> list[ZooEntryPoint] | None:
    from ..storage.files import read_cache_entry

    stored = read_cache_entry(entry, _key(folders))
    if stored is None:  # a miss
        return None
    try:
        found = [ZooEntryPoint(**fields) for fields in stored]
    except TypeError:  # an entry not shaped as this module writes them
        return None
    return found if all(isinstance(value, str) for ep in found for value in ep._asdict().values()) else None


def _write(entry: Path, folders, found: list[ZooEntryPoint]) -> None:
    from ..storage.files import write_cache_entry

    write_cache_entry(entry, _key(folders), [ep._asdict() for ep in found])
