"""The bigram model and the transformer language-model wrapper (seed 000)."""

from zoo_core import hookimpl


@hookimpl
def register_models(register):
    register("bigram", "zoo_plugins.models.bigram:build_bigram")
    register(
        "transformer",
        "zoo_plugins.models.transformer:build_transformer",
        config="zoo_plugins.models.settings:TransformerConfig",
    )
