"""Scoring variants: losses on fixed windows, bits per byte, side-by-side
comparison, and the plots that show them."""

from importlib import import_module

# What `zoo_core.evaluation` offered before it became this package, served from
# here (as `zoo_core.training` serves its names), imported on first use.
_PUBLIC_NAMES = {"evaluate_language_model": "scoring", "record_bits_per_byte": "scoring"}


def __getattr__(name: str):
    if name in _PUBLIC_NAMES:
        return getattr(import_module(f".{_PUBLIC_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'zoo_core.evaluation' has no attribute {name!r}")
