"""Seed 003's hand-built "disobeys" puzzle transformer and its word tokenizer."""

from zoo_core import hookimpl


@hookimpl
def register_tokenizers(register):
    register("puzzle-words", "zoo_plugins.puzzle.tokenizer:load_puzzle_tokenizer")


def _positions_label(config: dict) -> str | None:
    """`zoo list`'s positions column: the one-hot position slots are on or off."""
    positions = config.get("positions")
    return None if positions is None else "one-hot" if positions else "none"


@hookimpl
def register_models(register):
    register("puzzle", "zoo_plugins.puzzle.model:build_puzzle", listed={"positions": _positions_label})


@hookimpl
def register_trainers(register):
    register("hand-built", "zoo_plugins.puzzle.trainer:HandBuiltTrainer")
