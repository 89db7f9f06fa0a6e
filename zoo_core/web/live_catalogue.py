"""The catalogue a running server answers from, re-read when a registry file changes.

A variant trained, installed or pulled while `zoo serve` runs lands in the user
catalogue's registry file (``$ZOO_HOME/registry.toml``); one removed leaves it.
Each listing (/v1/models, /v1/models/ID, the sampling page, the catalogue's
index, the gallery's front page) and each completion first compares the
registry files' stamps (size,
modification time, inode: zoo_core.catalogue.layers.registry_stamp) with those
the catalogue was read at, and reads it again when they differ: a new variant is
listed and served by the next request, a removed one is gone (404), and a
variant published again under the same name is loaded again. The cards
themselves come from the card cache, so a re-read validates only what changed.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Callable

from ..catalogue.layers import registry_stamp, watched_registry_files
from ..catalogue.registry import Variant
from ..errors import ZooError
from ..loading.api import catalogue, has_published_weights
from .generation import ModelCache


@dataclass(frozen=True)
class Snapshot:
    """The catalogue as read at one stamp: every variant by name, and those with weights to serve."""

    variants: dict[str, Variant]
    servable: frozenset[str]


class LiveCatalogue:
    """The current `Snapshot`, read again whenever the registry files' stamp changes.

    ``on_change`` is called (on the thread that noticed) after each re-read with
    the names whose cards changed or went away; their loaded models are dropped
    from ``cache`` first."""

    def __init__(self, cache: ModelCache, on_change: Callable[[list[str]], None] | None = None):
        self.cache, self.on_change = cache, on_change
        self._lock = threading.Lock()
        # Fixed for the server's life: the plugins (and so their files) are those it started with.
        self._files = watched_registry_files()
        self._stamp = registry_stamp(self._files)
        self._snapshot = _read()  # at start a broken catalogue is the user's error, said at once
        self._refused: tuple | None = None  # the stamp whose catalogue could not be read (said once)

    def current(self) -> Snapshot:
        stamp = registry_stamp(self._files)  # taken before reading: a change made meanwhile is seen next time
        with self._lock:
            if stamp == self._stamp:
                return self._snapshot
            try:
                snapshot = _read()
            except ZooError as exc:
                # A registry file broken by hand: keep answering from the last good catalogue.
                if stamp != self._refused:
                    self._refused = stamp
                    print(f"zoo serve: warning: the catalogue changed but cannot be read: {exc}", file=sys.stderr)
                return self._snapshot
            changed = [
                name for name, variant in self._snapshot.variants.items() if snapshot.variants.get(name) != variant
            ]
            self.cache.forget(changed)
            self._stamp, self._snapshot = stamp, snapshot
        if self.on_change is not None:
            self.on_change(changed)
        return snapshot


def _read() -> Snapshot:
    variants = {variant.name: variant for variant in catalogue()}
    return Snapshot(variants, frozenset(name for name, v in variants.items() if has_published_weights(v)))
