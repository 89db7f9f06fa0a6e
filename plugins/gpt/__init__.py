"""The character-level GPT of seed 004."""

from zoo_core import hookimpl

from ..models import TRANSFORMER_LISTED


@hookimpl
def register_models(register):
    # The transformer's settings: a card's config is validated by the same model (GPT's defaults apply at build),
    # and `zoo list` shows the same columns.
    register(
        "gpt",
        "zoo_plugins.gpt.model:build_gpt",
        config="zoo_plugins.models.settings:TransformerConfig",
        listed=TRANSFORMER_LISTED,
    )
