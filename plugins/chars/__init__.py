"""Character-level tokenizer (seed 004): one token per distinct character of the corpus."""

from zoo_core import hookimpl


@hookimpl
def register_tokenizers(register):
    register(
        "char",
        "zoo_plugins.chars.tokenizer:load_char_tokenizer",
        train="zoo_plugins.chars.tokenizer:train_char_tokenizer",
    )
