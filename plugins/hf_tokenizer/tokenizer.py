"""A `tokenizer.json` run by Hugging Face `tokenizers`, the library that wrote it.

Whatever the file describes (GPT-2's byte-level BPE, Llama's SentencePiece-style
BPE with byte fallback, a Unigram model, their normalisers and pre-tokenisers)
encodes exactly as transformers encodes it, because it is the same code. The
zoo encodes raw text: no beginning-of-text or other special token is added (a
model's template adds those where it wants them; a prompt gets the BOS the card
records, zoo_core/inference/bos.py), and decoding keeps every token it is given.

A model's vocabulary is often padded past its tokenizer's (GPT-NeoX to a
multiple of 128, Qwen2 to 151,936): the card's ``vocab_size`` is the model's,
and the padding ids, which no text encodes to, decode to nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tokenizers import Tokenizer

from zoo_core.errors import ZooError

# Qwen2's tokenizer.json, among the largest in use, is 7 MB.
MAX_TOKENIZER_JSON_BYTES = 64 * 1024 * 1024


class HFTokenizer:
    """A `tokenizers.Tokenizer` with the zoo's encode/decode and the model's vocabulary size."""

    def __init__(self, backend: Tokenizer, vocab_size: int):
        self.backend = backend
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ZooError(f"token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})")
        return self.backend.decode(ids, skip_special_tokens=False)


def read_tokenizer_json(path: Path) -> Tokenizer:
    """The file as a `tokenizers.Tokenizer`, or one line saying why not."""
    try:
        size = path.stat().st_size
        if size > MAX_TOKENIZER_JSON_BYTES:
            raise ZooError(f"{path}: {size:,} bytes, more than a tokenizer.json can need")
        return Tokenizer.from_file(str(path))
    except FileNotFoundError:
        raise ZooError(f"{path}: tokenizer file not found") from None
    except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
        if isinstance(exc, ZooError):
            raise
        reason = " ".join(str(exc).split())[:200]
        raise ZooError(f"{path}: not a tokenizers tokenizer.json ({reason})") from None


def load_hf_tokenizer(spec, path: Path | None) -> HFTokenizer:
    """Factory registered as 'hf': the card's ``tokenizer.file`` is the tokenizer.json."""
    if path is None:
        raise ZooError("tokenizer 'hf' needs its tokenizer.json (tokenizer.file in the card)")
    backend = read_tokenizer_json(path)
    size = backend.get_vocab_size(with_added_tokens=True)
    if size > spec.vocab_size:
        raise ZooError(f"{path}: tokenizer has {size} tokens, more than the card's vocab_size {spec.vocab_size}")
    return HFTokenizer(backend, spec.vocab_size)
