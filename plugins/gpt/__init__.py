"""The character-level GPT of seed 004."""

from zoo_core import hookimpl

from ..models import TRANSFORMER_LISTED


@hookimpl
def register_models(register):
    # Its card's settings are a transformer's, so `zoo list` shows the same columns.
    register("gpt", "zoo_plugins.gpt.model:build_gpt", listed=TRANSFORMER_LISTED)
