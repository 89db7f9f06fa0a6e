"""The character-level GPT of seed 004."""

from zoo_core import hookimpl


@hookimpl
def register_models(register):
    register("gpt", "plugins.gpt.model:build_gpt")
