"""Where the zoo keeps the user's things: never inside an installed package.

- the user catalogue (`zoo train --publish` writes it) and the user's own
  datasets (`zoo datasets add`): ``$ZOO_HOME``, else ``$XDG_DATA_HOME/zoo``,
  else ``~/.local/share/zoo``;
- locks and other throwaway state: ``$ZOO_CACHE``, else ``$XDG_CACHE_HOME/zoo``,
  else ``~/.cache/zoo``.

These follow the XDG base-directory convention that pip, Hugging Face and timm
caches follow on Linux.
"""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(variable: str, fallback: str) -> Path:
    value = os.environ.get(variable)
    # The specification says relative values are invalid and must be ignored.
    return Path(value) if value and os.path.isabs(value) else Path.home() / fallback


def zoo_home() -> Path:
    """The user catalogue's folder (it may not exist yet)."""
    explicit = os.environ.get("ZOO_HOME")
    return Path(explicit).expanduser().resolve() if explicit else _xdg("XDG_DATA_HOME", ".local/share") / "zoo"


def user_registry_path() -> Path:
    return zoo_home() / "registry.toml"


def user_datasets_path() -> Path:
    return zoo_home() / "datasets.toml"


def cache_dir() -> Path:
    explicit = os.environ.get("ZOO_CACHE")
    return Path(explicit).expanduser().resolve() if explicit else _xdg("XDG_CACHE_HOME", ".cache") / "zoo"


def inside_installed_package(path: Path) -> bool:
    """Whether ``path`` lies in the interpreter's site-packages: a file there
    belongs to pip, and the zoo never rewrites it (an upgrade would replace it)."""
    import sysconfig  # not on `zoo list`'s path

    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    path = Path(path).resolve()
    return any(folder == path or folder in path.parents for folder in installed)
