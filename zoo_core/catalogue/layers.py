"""Catalogues in layers: built-in, installed plugins, the user's own, extra files.

Variants come from, in this order:

1. ``built-in``: the zoo's own registry (shipped in the wheel, or the
   repository's `registry.toml` in a checkout);
2. ``plugin``: registry files installed plugins contribute (``register_variants``);
3. ``user``: the user's catalogue, ``$ZOO_HOME/registry.toml`` (default
   ``~/.local/share/zoo``), where `zoo train --publish` writes;
4. ``extra``: files named by ``ZOO_REGISTRY`` (a list separated like ``PATH``)
   and by ``--registry FILE`` (repeatable), in that order.

``--only-registry FILE`` reads that file alone (no other layer): how a run
written with `zoo train NAME --out DIR` is used when NAME is also declared
elsewhere (the command `zoo train` prints then says so).

Extra files add variants; none replaces another layer. A name lives in one
layer only: a later declaration of a name already taken is refused, and the
refusal names both files (`zoo list` prints it, `zoo verify` fails on it). A
built-in or plugin registry that clashes is refused whole, as before: a plugin
either contributes all of its file or none of it. A file listed twice (say the
repository's registry also given with ``--registry``) is read once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ZooError
from ..plugin_api.manager import PluginSet, get_plugins
from ..storage.locations import user_registry_path
from .registry import Catalogue, read_registry_file

LAYERS = ("built-in", "plugin", "user", "extra")

# Files given with `--registry` on the command line (the CLI sets this once),
# and the one `--only-registry` names (then the only file read).
_command_line_registries: list[Path] = []
_only_registry: list[Path] = []


def set_command_line_registries(paths: list[Path] | None, only: Path | None = None) -> None:
    _command_line_registries[:] = [Path(p) for p in paths or []]
    _only_registry[:] = [Path(only)] if only is not None else []


def command_line_registries() -> list[Path]:
    return list(_command_line_registries)


def extra_registry_paths() -> list[Path]:
    from_environment = [Path(p) for p in os.environ.get("ZOO_REGISTRY", "").split(os.pathsep) if p.strip()]
    return [*from_environment, *_command_line_registries]


@dataclass(frozen=True)
class RegistryFile:
    path: Path
    plugin: str  # the contributing plugin; "user" or "extra" for the user's files
    layer: str


def registry_files(plugins: PluginSet) -> list[RegistryFile]:
    """Every registry file of every layer, in layer order, each file once."""
    if _only_registry:
        return [RegistryFile(_only_registry[0].expanduser().resolve(), "extra", "extra")]
    files: list[RegistryFile] = []
    for path, plugin in plugins.variant_files:
        layer = "built-in" if plugins.plugins[plugin].builtin else "plugin"
        files.append(RegistryFile(Path(path), plugin, layer))
    files.sort(key=lambda f: LAYERS.index(f.layer))  # stable: plugin order kept within a layer
    user = user_registry_path()
    if user.exists():
        files.append(RegistryFile(user, "user", "user"))
    for path in extra_registry_paths():
        files.append(RegistryFile(path, "extra", "extra"))
    seen, unique = set(), []
    for file in files:
        key = file.path.expanduser().resolve()
        if key not in seen:
            seen.add(key)
            unique.append(RegistryFile(key, file.plugin, file.layer))
    return unique


def watched_registry_files(plugins: PluginSet | None = None) -> list[Path]:
    """Every registry file the catalogue is read from, the user catalogue's even
    before it exists (the first publish creates it): what a server watches."""
    plugins = plugins or get_plugins()
    return list(dict.fromkeys([*(file.path for file in registry_files(plugins)), user_registry_path()]))


def registry_stamp(paths: list[Path]) -> tuple:
    """Each file's size, modification time and inode (None while absent): a
    different stamp means a different catalogue. A ``stat`` per file, cheap enough
    for a server to take on every request (zoo_core.web.live_catalogue); every
    write the zoo makes replaces the file, which changes all three."""
    return tuple(_file_stamp(path) for path in paths)


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:  # absent (not published yet, removed) or unreadable: reading says which
        return None
    return status.st_mtime_ns, status.st_size, status.st_ino


def read_into(catalogue: Catalogue, file: RegistryFile) -> None:
    """Add ``file``'s variants: in the user's own layers (user, extra) a clashing
    name is refused variant by variant; a built-in or plugin file clashes whole."""
    variants = read_registry_file(file.path, file.plugin, layer=file.layer)
    if file.layer in ("user", "extra"):
        for variant in variants:
            catalogue.add_or_refuse(variant)
    else:
        catalogue.add_all(variants)


def build_catalogue(plugins: PluginSet | None = None) -> Catalogue:
    """Every variant of every layer.

    A broken built-in registry is an error; a plugin's broken file is reported
    against that plugin and skipped; a broken user or extra file is an error
    (it is the user's own, and they asked for it).
    """
    plugins = plugins or get_plugins()
    result = Catalogue()
    for file in registry_files(plugins):
        if file.layer in ("user", "extra"):
            if file.layer == "extra" and not file.path.exists():
                raise ZooError(f"{file.path}: registry file not found (named by ZOO_REGISTRY or --registry)")
            read_into(result, file)
            continue
        info = plugins.plugins[file.plugin]
        try:
            read_into(result, file)
        except ZooError as exc:
            if info.builtin:
                raise
            info.errors.append(str(exc))
    return result
