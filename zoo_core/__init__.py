"""zoo: a plugin-based model zoo for small transformer language models.

Importing this package is cheap: torch is imported only when a model is built.
"""

import importlib

import pluggy

from .errors import UnknownName as UnknownName
from .errors import ZooError as ZooError
from .version import __version__ as __version__

hookimpl = pluggy.HookimplMarker("zoo")

# The API is resolved lazily so that `import zoo_core` stays free of torch.
_API = {"load", "build_network", "load_tokenizer"}
# Finding variants reads cards, never builds a network: these come from the torch-free front.
_LOOKUP = {"list_variants", "get_variant"}


def __getattr__(name):
    if name in _LOOKUP or name in _API:
        from .loading import lookup  # torch-free; the API below imports torch only when asked for

        return getattr(lookup if name in _LOOKUP else importlib.import_module(".loading.api", __name__), name)
    if name == "SamplingSettings":  # torch-free too
        from .inference.settings import SamplingSettings

        return SamplingSettings
    raise AttributeError(f"module 'zoo_core' has no attribute {name!r}")
