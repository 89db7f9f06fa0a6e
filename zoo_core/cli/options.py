"""What the handlers of the commands that run a loaded model share: loading it
on the threads asked for, and the sampling settings of the command's flags."""

from __future__ import annotations

from ..inference.settings import OPTION_NAMES, SamplingSettings
from ..inference.threads import check_threads, use_threads, use_threads_before_loading
from ..loading.api import get_variant, load_variant
from ..training.progress import WorkProgress
from .bounds import check_for_variant


def load_on_threads(args):
    """``args.name`` loaded for `zoo sample` and `zoo eval` (``--device``,
    ``--dtype``, ``--quantize``), torch's threads set from ``--threads`` or the model's size
    before loading, since loading is torch work too."""
    check_threads(args.threads)  # before paying for the catalogue and the checkpoint
    variant = get_variant(args.name)
    check_for_variant(args, variant.card)  # before loading: what this variant cannot use is refused at once
    use_threads_before_loading(variant.card.parameters, args.threads)
    # A first load reads and hashes the whole file (14 s for SmolLM2): a bar on a terminal says so.
    progress = WorkProgress(f"load {variant.name}")
    try:
        model = load_variant(variant, device=args.device, dtype=args.dtype, quantize=args.quantize, progress=progress)
    finally:
        progress.close()
    use_threads(model.network, args.threads)
    return model


def sampling_settings(args, **overrides):
    """The ``SamplingSettings`` of a command that samples: every setting it has a
    flag for, by the flag's name (``--top-p`` is ``top_p``), errors naming the
    flags; ``overrides`` for values the command reads differently."""
    given = {name: getattr(args, name) for name in OPTION_NAMES if hasattr(args, name)}
    return SamplingSettings(**{**given, **overrides}, flags=True)
