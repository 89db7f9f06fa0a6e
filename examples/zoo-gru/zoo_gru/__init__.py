"""zoo-gru: a recurrent language model for the zoo, and a variant trained with it.

The architecture declares ``context_kind = "unbounded"``: it carries a state
forward instead of seeing a window, so the zoo samples it one token per step
however long the sample, and scores each token from all the text before it.
Factories are "module:attribute" strings, so `zoo list` never imports torch
on our behalf.
"""

from pathlib import Path

from zoo_core import hookimpl

__version__ = "0.1.0"

VARIANTS = Path(__file__).resolve().parent / "variants" / "registry.toml"


@hookimpl
def register_models(register):
    # listed=: what `zoo list` shows in its layers column for a gru card.
    register("gru", "zoo_gru.gru:build_gru", listed={"layers": "n_layer"})


@hookimpl
def register_variants(register):
    # Paths inside this TOML (checkpoint, tokenizer file) are relative to it.
    register(VARIANTS)
