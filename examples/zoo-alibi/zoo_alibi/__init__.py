"""zoo-alibi: ALiBi positions, a SwiGLU pre-norm block and one trained variant.

The hooks below are all the zoo sees of this package. Factories are given as
"module:attribute" strings so that `zoo list` never imports torch on our behalf.
"""

from pathlib import Path

from zoo_core import hookimpl

__version__ = "0.1.0"

VARIANTS = Path(__file__).resolve().parent / "variants" / "registry.toml"


@hookimpl
def register_positions(register):
    register("alibi", "zoo_alibi.alibi:ALiBiPositions")


@hookimpl
def register_blocks(register):
    register("swiglu-pre-norm", "zoo_alibi.swiglu:SwiGLUPreNormBlock")


@hookimpl
def register_variants(register):
    # Paths inside this TOML (checkpoint, tokenizer ranks) are relative to it.
    register(VARIANTS)
