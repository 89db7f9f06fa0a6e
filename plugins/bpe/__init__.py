"""Byte-level BPE tokenizer, encoded and decoded by tiktoken."""

from zoo_core import hookimpl


@hookimpl
def register_tokenizers(register):
    register("bpe", "zoo_plugins.bpe.tokenizer:load_bpe_tokenizer", train="zoo_plugins.bpe.training:train_tokenizer")
