"""Seed 003's hand-built "disobeys" puzzle transformer and its word tokenizer."""

from zoo_core import hookimpl


@hookimpl
def register_tokenizers(register):
    register("puzzle-words", "zoo_plugins.puzzle.tokenizer:load_puzzle_tokenizer")


@hookimpl
def register_models(register):
    register("puzzle", "zoo_plugins.puzzle.model:build_puzzle")


@hookimpl
def register_trainers(register):
    register("hand-built", "zoo_plugins.puzzle.trainer:HandBuiltTrainer")
