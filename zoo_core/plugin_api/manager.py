"""Finds plugins through the ``zoo`` entry-point group and collects what they register.

Built-in plugins are found the same way as third-party ones, by asking
importlib.metadata at every start. A plugin that fails
to import, or whose hook raises, is recorded and skipped: the rest of the zoo
keeps working and `zoo plugins` shows the error; so does a hook whose name is not
a zoo hook (a typo would otherwise do nothing) and a second package claiming a
plugin name already taken. Two third-party plugins registering the same component
name make that name unusable, with an error naming both, rather than letting one
silently win; a third-party claim on a built-in's name is refused instead, and
reported against the third-party plugin, so installing a plugin can never take
a built-in variant away.

What a factory returns is checked against its protocol (`zoo_core.plugin_api.protocols`)
when it is created: a mismatch is one line naming the plugin, the component and
what is missing, instead of a failure deep inside torch.

Environment:
    ZOO_DISABLE_PLUGIN_AUTOLOAD=1  load only the zoo's own built-in plugins
    ZOO_PLUGINS=a,b                load only these third-party plugins (entry-point names)
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pluggy

from ..corpus.datasets import Datasets
from ..corpus.text_files import Dataset
from ..errors import UnknownName, ZooError
from . import hookspecs
from .protocols import conformance_problem

BUILTIN_DISTRIBUTION = "zoo-lm"
GROUP = "zoo"
COMPONENT_KINDS = ("tokenizers", "positions", "blocks", "models", "trainers", "adapters", "families")


@dataclass
class PluginInfo:
    name: str
    distribution: str
    version: str
    builtin: bool
    registered: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


@dataclass
class _Registration:
    factory: Any  # callable, or "module:attribute" to import on first use
    plugin: str
    builtin: bool = False
    extras: dict[str, Any] = field(default_factory=dict)  # e.g. a tokenizer's train=


class BuiltinNameTaken(ZooError):
    """A third-party plugin registered a name a built-in plugin owns."""

    def __init__(self, message: str, refused: str):
        super().__init__(message)
        self.refused = refused  # the third-party plugin the error is reported against


class Components:
    """Registered factories of one kind ('positions', 'blocks', ...), by name."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, _Registration] = {}
        self._conflicts: dict[str, list[str]] = {}

    def add(self, name: str, factory: Any, plugin: str, builtin: bool = False, **extras: Any) -> None:
        """Register ``factory`` under ``name``. Raises BuiltinNameTaken when a
        third-party plugin claims a built-in's name (the built-in keeps it)."""
        if not isinstance(name, str) or not name:
            raise ZooError(f"plugin '{plugin}' registered a {self.kind[:-1]} with an empty or non-text name")
        if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
            raise ZooError(
                f"plugin '{plugin}' registered {self.kind[:-1]} '{name}' with a factory that is neither callable nor 'module:attribute'"
            )
        existing = self._entries.get(name)
        if existing is not None and existing.builtin != builtin:
            if not builtin:
                raise BuiltinNameTaken(
                    f"{self.kind[:-1]} '{name}' belongs to the built-in plugin '{existing.plugin}'; "
                    f"this plugin's '{name}' was refused (choose another name)",
                    refused=plugin,
                )
            # A built-in registering after a third party (not the usual order): the built-in wins all the same.
            self._entries[name] = _Registration(factory, plugin, builtin, extras)
            raise BuiltinNameTaken(
                f"{self.kind[:-1]} '{name}' belongs to the built-in plugin '{plugin}'; "
                f"plugin '{existing.plugin}' registered it too and was refused",
                refused=existing.plugin,
            )
        if name in self._entries or name in self._conflicts:
            owners = self._conflicts.setdefault(name, [self._entries.pop(name).plugin] if name in self._entries else [])
            owners.append(plugin)
            return
        self._entries[name] = _Registration(factory, plugin, builtin, extras)

    def extra(self, name: str, key: str) -> Any:
        """What the plugin registered beside the factory (``register(name, factory, key=...)``),
        imported if it was given as 'module:attribute'; None when it gave none."""
        self.factory(name)  # the same errors as using the component: unknown, conflicting
        entry = self._entries[name]
        value = entry.extras.get(key)
        if isinstance(value, str) and ":" in value:
            value = entry.extras[key] = _import_attribute(value, entry.plugin)
        return value

    def declared(self, name: str, key: str) -> Any:
        """What the plugin registered beside the factory under ``key``, imported if
        given as 'module:attribute', without importing the factory (a config model
        must not import torch); None when ``name`` is unusable or gave none."""
        entry = self._entries.get(name)
        if entry is None or name in self._conflicts:
            return None
        value = entry.extras.get(key)
        if isinstance(value, str) and ":" in value:
            value = entry.extras[key] = _import_attribute(value, entry.plugin)
        return value

    def declaring(self, key: str) -> list[str]:
        """The usable names registered with ``key`` beside their factory: the built-in
        plugins' first, then by name (the order the testing kit picks a host in)."""
        found = [name for name, entry in self._entries.items() if entry.extras.get(key) is not None]
        return sorted(found, key=lambda name: (not self._entries[name].builtin, name))

    def problem(self, name: str) -> str | None:
        """Why ``name`` cannot be used now (unknown, or claimed twice), without importing anything."""
        if name in self._conflicts:
            return f"{self.kind[:-1]} '{name}' is registered by " + " and ".join(
                f"'{p}'" for p in self._conflicts[name]
            )
        if name not in self._entries:
            return f"no {self.kind[:-1]} named '{name}' is registered"
        return None

    def conflicts(self) -> dict[str, list[str]]:
        return dict(self._conflicts)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def names_in_order(self) -> list[str]:
        """The usable names in the order they were registered (built-in plugins first)."""
        return list(self._entries)

    def plugin_of(self, name: str) -> str:
        return self._entries[name].plugin

    def factory(self, name: str) -> Callable[..., Any]:
        if name in self._conflicts:
            owners = " and ".join(f"'{p}'" for p in self._conflicts[name])
            raise ZooError(
                f"{self.kind[:-1]} '{name}' is registered by more than one plugin ({owners}); uninstall or disable one"
            )
        try:
            entry = self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise UnknownName(f"no {self.kind[:-1]} named '{name}' is registered (known: {known})") from None
        if isinstance(entry.factory, str):
            entry.factory = _import_attribute(entry.factory, entry.plugin)
        return entry.factory

    def create(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the factory and check what it returns against the kind's protocol."""
        made = self.factory(name)(*args, **kwargs)
        problem = conformance_problem(self.kind, made)
        if problem:
            raise ZooError(
                f"plugin '{self.plugin_of(name)}': {self.kind[:-1]} '{name}': the factory returned {problem}"
            )
        return made


def _import_attribute(reference: str, plugin: str) -> Any:
    module_name, _, attribute = reference.partition(":")
    try:
        target = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception as exc:  # a broken plugin must not look like a zoo bug
        raise ZooError(f"plugin '{plugin}': cannot import '{reference}': {type(exc).__name__}: {exc}") from exc
    return target


def _described_entry_points() -> list[tuple[importlib.metadata.EntryPoint, str, str]]:
    """Every entry point in the `zoo` group, in `sys.path` order, with its distribution's name and version."""
    described: dict[int, tuple[str, str]] = {}  # by id(): a distribution's entry points share it
    found: list[tuple[importlib.metadata.EntryPoint, str, str]] = []
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = ep.dist
        if dist is None:
            found.append((ep, "?", "?"))
            continue
        if id(dist) not in described:  # dist.metadata parses the whole METADATA file each time
            metadata = dist.metadata
            described[id(dist)] = (metadata["Name"], metadata["Version"])
        found.append((ep, *described[id(dist)]))
    return found


class PluginSet:
    """The outcome of loading every plugin: components, variant files, reports."""

    def __init__(self) -> None:
        self.plugins: dict[str, PluginInfo] = {}
        self.components = {kind: Components(kind) for kind in COMPONENT_KINDS}
        self.variant_files: list[tuple[Path, str]] = []
        self.datasets = Datasets()
        self.manager = pluggy.PluginManager("zoo")
        self.manager.add_hookspecs(hookspecs)

    # -- loading ---------------------------------------------------------------

    def load_entry_points(self) -> None:
        disable_autoload = os.environ.get("ZOO_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0")
        selected = {n.strip() for n in os.environ.get("ZOO_PLUGINS", "").split(",") if n.strip()}
        found = _described_entry_points()
        found.sort(key=lambda item: (item[1] != BUILTIN_DISTRIBUTION, item[0].name))
        seen: dict[str, str] = {}  # entry-point name -> distribution
        for ep, distribution, version in found:
            builtin = distribution == BUILTIN_DISTRIBUTION
            if not builtin and (disable_autoload or (selected and ep.name not in selected)):
                continue
            if ep.name in seen:
                if seen[ep.name] != distribution:
                    # Another package took the name first; skipping this one must not be silent.
                    self.plugins[ep.name].errors.append(
                        f"plugin name '{ep.name}' is also claimed by {distribution} {version}, which was not loaded"
                    )
                continue  # otherwise the same distribution seen twice on sys.path
            seen[ep.name] = distribution
            info = PluginInfo(ep.name, distribution, version, builtin)
            self.plugins[ep.name] = info
            try:
                module = ep.load()
            except Exception as exc:
                info.errors.append(f"failed to import '{ep.value}': {type(exc).__name__}: {exc}")
                continue
            self.add_plugin(module, info)

    def add_plugin(self, module: Any, info: PluginInfo) -> None:
        """Register one plugin object and run its hooks, each in isolation."""
        self.plugins.setdefault(info.name, info)
        try:
            self.manager.register(module, name=info.name)
        except Exception as exc:  # pluggy rejects bad signatures
            info.errors.append(f"rejected by the plugin manager: {exc}")
            return
        for caller in self.manager.get_hookcallers(module) or []:
            if not caller.has_spec():  # pluggy accepts these silently; a typo would do nothing
                known = ", ".join(sorted(name for name in dir(hookspecs) if name.startswith("register_")))
                info.errors.append(f"'{caller.name}' is not a zoo hook and is never called (hooks: {known})")
        for kind in COMPONENT_KINDS:
            self._call(info, f"register_{kind}", self._component_registrar(kind, info))
        self._call(info, "register_variants", self._variant_registrar(info))
        self._call(info, "register_datasets", self._dataset_registrar(info))

    def _call(self, info: PluginInfo, hook_name: str, register: Callable[..., None]) -> None:
        caller = getattr(self.manager.hook, hook_name)
        for impl in caller.get_hookimpls():
            if impl.plugin_name != info.name:
                continue
            try:
                impl.function(register=register)
            except Exception as exc:
                info.errors.append(f"hook {hook_name} raised {type(exc).__name__}: {exc}")

    def _component_registrar(self, kind: str, info: PluginInfo) -> Callable[..., None]:
        def register(name: str, factory: Any, **extras: Any) -> None:
            try:
                self.components[kind].add(name, factory, info.name, info.builtin, **extras)
            except BuiltinNameTaken as exc:
                # Reported against the third-party plugin, whichever registered first.
                owner = self.plugins.get(exc.refused, info)
                owner.errors.append(str(exc))
                if not info.builtin:
                    return
            info.registered.setdefault(kind, []).append(name)

        return register

    def _variant_registrar(self, info: PluginInfo) -> Callable[..., None]:
        def register(path: str | os.PathLike[str]) -> None:
            self.variant_files.append((Path(path), info.name))
            info.registered.setdefault("variant files", []).append(str(path))

        return register

    def _dataset_registrar(self, info: PluginInfo) -> Callable[..., None]:
        def register(
            name: str, path: str | os.PathLike[str], *, sha256: str, train_fraction: float = 0.9, description: str = ""
        ) -> None:
            self.datasets.add(Dataset(name, Path(path), sha256, float(train_fraction), description, info.name))
            info.registered.setdefault("datasets", []).append(name)

        return register

    # -- reporting -------------------------------------------------------------

    def problems(self) -> list[str]:
        """Every plugin error and name conflict, one line each ('' when all is well)."""
        lines = [f"plugin '{info.name}': {error}" for info in self.plugins.values() for error in info.errors]
        return lines + self.conflict_messages()

    def conflict_messages(self) -> list[str]:
        messages = []
        for kind, components in self.components.items():
            for name, owners in components.conflicts().items():
                messages.append(f"{kind[:-1]} '{name}' is registered by " + " and ".join(f"'{o}'" for o in owners))
        for name, owners in self.datasets.conflicts().items():
            messages.append(f"dataset '{name}' is registered by " + " and ".join(f"'{o}'" for o in owners))
        return messages


_loaded: PluginSet | None = None


def get_plugins(reload: bool = False) -> PluginSet:
    """The process-wide plugin set, loaded on first use."""
    global _loaded
    if _loaded is None or reload:
        plugin_set = PluginSet()
        plugin_set.load_entry_points()
        _loaded = plugin_set
    return _loaded
