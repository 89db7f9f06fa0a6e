"""Sampling settings: every option of a draw, validated once, passed whole.

The command line, the Python API and the server each build one
``SamplingSettings`` and hand it, unchanged, down to the sampler; no layer in
between lists the options again. Adding an option means a field here, the
filter in ``zoo_core.inference.sampling.filter_logits`` that applies it, and a
flag of `zoo sample` (the server's request takes it by the same name).

Errors name the option as the caller spells it: ``top_p`` from Python,
``--top-p`` from the command line (``SamplingSettings(..., flags=True)``).
This module imports no torch, so the command line can check what the user
typed before paying for it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import InitVar, dataclass, fields

from ..errors import ZooError
from ..seed_range import check_seed


@dataclass(frozen=True, kw_only=True)
class SamplingSettings:
    """How to draw: the same settings and seed always give the same text."""

    max_new_tokens: int = 100
    temperature: float = 1.0  # divides the logits; 0 is greedy decoding (no draw, the seed does not matter)
    top_k: int | None = None  # draw only among the k most likely tokens; None: all
    top_p: float | None = None  # only the most likely tokens that together reach p; None or 1: all
    min_p: float | None = None  # only tokens at least min_p times as likely as the best; None or 0: all
    stop: tuple[str, ...] = ()  # the text ends before the first of these strings
    seed: int = 0  # sample i of num_samples uses seed + i (see sampling.sample_seeds)
    num_samples: int = 1  # how many samples of each prompt
    use_cache: bool | None = None  # the model's KV cache; None: when the model has one (same tokens either way)
    flags: InitVar[bool] = False  # name options in errors as command-line flags (--top-p), not as top_p

    def __post_init__(self, flags: bool) -> None:
        def name(option: str) -> str:
            return "--" + option.replace("_", "-") if flags else option

        for option in ("max_new_tokens", "num_samples", "top_k"):
            value = getattr(self, option)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ZooError(f"{name(option)} must be a whole number, not {value!r}")
        if self.max_new_tokens < 1:
            raise ZooError(f"{name('max_new_tokens')} must be at least 1, not {self.max_new_tokens}")
        if not 0 <= self.temperature < math.inf:  # also rejects NaN
            raise ZooError(f"{name('temperature')} must be 0 (greedy) or greater, and finite, not {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ZooError(f"{name('top_k')} must be at least 1, not {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ZooError(f"{name('top_p')} must be greater than 0 and at most 1, not {self.top_p}")
        if self.min_p is not None and not 0 <= self.min_p <= 1:
            raise ZooError(f"{name('min_p')} must be from 0 to 1, not {self.min_p}")
        if self.num_samples < 1:
            raise ZooError(f"{name('num_samples')} must be at least 1, not {self.num_samples}")
        check_seed(self.seed, name("seed"))
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        if not all(isinstance(s, str) for s in stop):
            raise ZooError(f"{name('stop')} must be strings, not {stop!r}")
        # Frozen: the normal form (a tuple without empty strings) is set once, here.
        object.__setattr__(self, "stop", tuple(s for s in stop if s))

    def replace(self, **changes) -> SamplingSettings:
        """A copy with ``changes``, validated again."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


OPTION_NAMES = tuple(f.name for f in fields(SamplingSettings))


def resolve_settings(settings: SamplingSettings | int | None = None, **options) -> SamplingSettings:
    """The settings a sampling call runs with: ``settings`` with ``options``
    replacing its fields, or the defaults with ``options``. An int stands for
    ``max_new_tokens`` (the argument that came first before settings existed, so
    ``model.generate("ROMEO:", 60, seed=1)`` keeps working)."""
    if settings is None:
        return SamplingSettings(**options)
    if isinstance(settings, SamplingSettings):
        return settings.replace(**options) if options else settings
    if isinstance(settings, int) and not isinstance(settings, bool):
        return SamplingSettings(max_new_tokens=settings, **options)
    raise ZooError(f"settings must be SamplingSettings or a number of new tokens, not {type(settings).__name__}")
