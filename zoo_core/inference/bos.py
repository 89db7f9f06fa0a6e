"""The beginning-of-sequence token a tokenizer puts before a text read from its start.

Many imported models were trained with every document opened by a BOS token
(Gemma's ``<bos>``, Llama's ``<s>``) and read a text without it badly. Their
tokenizer says so (a GGUF's ``tokenizer.ggml.add_bos_token``, a tokenizer.json's
post-processor), and llama.cpp and transformers (``add_special_tokens=True``)
put it first by themselves. The zoo's tokenizers encode exactly the text they
are given, so the import records the token in the card
(``TokenizerSpec.bos_id``) and whatever reads a text from its start (a prompt to
sample, generate, complete or inspect; a text scored with nothing before it)
puts it first with ``with_bos``. A chat template writes its own, and a text
that already starts with it keeps just the one.
"""

from __future__ import annotations

from typing import Sequence


def with_bos(bos_id: int | None, ids: Sequence[int]) -> list[int]:
    """``ids`` after ``bos_id``, unless there is none or they already start with it."""
    if bos_id is None or list(ids[:1]) == [bos_id]:
        return list(ids)
    return [bos_id, *ids]
