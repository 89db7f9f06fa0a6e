"""Tokenizers read from a Hugging Face `tokenizer.json` (byte-level BPE, SentencePiece-style BPE or Unigram)."""

from zoo_core import hookimpl


@hookimpl
def register_tokenizers(register):
    register("hf", "zoo_plugins.hf_tokenizer.tokenizer:load_hf_tokenizer")
