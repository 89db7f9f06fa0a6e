"""Scoring variants: losses on fixed windows, bits per byte, side-by-side
comparison, and the plots that show them."""

_SCORING_NAMES = {"evaluate_language_model", "record_bits_per_byte"}


def __getattr__(name: str):
    # What `zoo_core.evaluation` offered before it became this package.
    if name in _SCORING_NAMES:
        from . import scoring

        return getattr(scoring, name)
    raise AttributeError(f"module 'zoo_core.evaluation' has no attribute {name!r}")
