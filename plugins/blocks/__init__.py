"""Pre-norm and post-norm transformer blocks (LayerNorm or RMSNorm) built from explicit causal attention."""

from zoo_core import hookimpl


@hookimpl
def register_blocks(register):
    register("pre-norm", "zoo_plugins.blocks.blocks:PreNormBlock")
    register("post-norm", "zoo_plugins.blocks.blocks:PostNormBlock")
