"""Byte-level BPE tokenizer, encoded and decoded by tiktoken."""

from zoo_core import hookimpl


@hookimpl
def register_tokenizers(register):
    register("bpe", "plugins.bpe.tokenizer:load_bpe_tokenizer", train="plugins.bpe.training:train_tokenizer")
