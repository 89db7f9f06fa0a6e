"""Containment: a path named in a card stays inside the folder of the registry that names it.

A registry file is data, not a user: whoever wrote it (a plugin author, someone
who sent you a catalogue) must not be able to make the zoo read
``../../../../etc/passwd``, an absolute path or a symlink leading out of its
folder. `resolve_inside` is the one place that decides; checkpoint, tokenizer
and corpus paths all go through it. A card of the user's own may opt out per
entry with ``allow_external_paths = true``.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from ..errors import ZooError, printable


def resolve_inside(base_dir: Path, relative: str, *, what: str = "path", allow_outside: bool = False) -> Path:
    """``base_dir / relative`` with every symlink resolved, refused (ZooError, one
    line naming ``what``) unless it lies inside ``base_dir``'s own real location.

    With ``allow_outside`` any path is accepted: for entries whose author opted in.
    """
    base = Path(os.path.realpath(base_dir))
    shown = printable(str(relative))
    if "\x00" in str(relative):
        raise ZooError(f"{base}: {what} '{shown}' holds a NUL character")
    if allow_outside:
        return Path(os.path.realpath(base / os.path.expanduser(relative)))
    if PurePosixPath(relative).is_absolute() or PureWindowsPath(relative).drive or str(relative).startswith("~"):
        raise ZooError(
            f"{base}: {what} '{shown}' is absolute; a card names files relative to its registry's folder "
            f"(set allow_external_paths = true in your own card to permit it)"
        )
    if ".." in PurePosixPath(relative).parts:
        raise ZooError(
            f"{base}: {what} '{shown}' leaves its registry's folder ('..'); "
            f"set allow_external_paths = true in your own card to permit it"
        )
    resolved = Path(os.path.realpath(base / relative))
    if resolved != base and base not in resolved.parents:
        raise ZooError(
            f"{base}: {what} '{shown}' is a symlink leading out of its registry's folder (to {printable(str(resolved))}); "
            f"set allow_external_paths = true in your own card to permit it"
        )
    return resolved


def check_external_paths(path: Path, name: str, allowed: bool, plugin: str, layer: str) -> None:
    if allowed and layer == "plugin":
        raise ZooError(
            f"{path}: variant '{printable(name)}': allow_external_paths is only honoured in your own "
            f"catalogue, not in plugin '{plugin}'"
        )
