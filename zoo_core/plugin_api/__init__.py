"""What plugin authors import: the hook specifications, the protocols their
components satisfy, base classes, and the plugin manager that finds plugins
through the ``zoo`` entry-point group. The testing kit and the package skeleton
are the authors' kit, zoo_core.kit: they use the whole core, this the ground floor."""

import importlib

# Resolved lazily: importing this package must not import torch (`zoo list` stays fast).
_HOOK_POINTS = {"HookPoint", "HookFunction", "hook_point_names", "hook_points", "hooks", "run_with_cache"}


def __getattr__(name):
    if name in _HOOK_POINTS:
        # import_module, not `from . import hook_points`: the function of that
        # name is one of these attributes, and would be looked up here again
        return getattr(importlib.import_module(f"{__name__}.hook_points"), name)
    raise AttributeError(f"module 'zoo_core.plugin_api' has no attribute {name!r}")
