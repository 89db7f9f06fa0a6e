"""The character-level GPT of seed 004."""

from zoo_core import hookimpl


@hookimpl
def register_models(register):
    register("gpt", "zoo_plugins.gpt.model:build_gpt")
