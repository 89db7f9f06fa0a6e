"""A character vocabulary stored as a JSON list, so loading needs no corpus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from zoo_core.corpus.tokenizer_training import TrainedTokenizer
from zoo_core.errors import ZooError
from zoo_core.storage.files import read_limited

# Every Unicode code point, JSON-escaped, would take about 14 MB.
MAX_VOCABULARY_BYTES = 16 * 1024 * 1024


class CharTokenizer:
    """Token i is the i-th of the sorted distinct characters."""

    def __init__(self, characters: Sequence[str]):
        self.characters = list(characters)
        self.index = {c: i for i, c in enumerate(self.characters)}
        self.vocab_size = len(self.characters)

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(sorted(set(text)))

    @classmethod
    def from_file(cls, path: Path) -> "CharTokenizer":
        try:
            data = json.loads(read_limited(path, MAX_VOCABULARY_BYTES, "tokenizer file").decode("utf-8"))
            characters = data["characters"]
        except FileNotFoundError:
            raise ZooError(f"{path}: tokenizer file not found") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, RecursionError) as exc:
            raise ZooError(f"{path}: damaged tokenizer file ({type(exc).__name__})") from None
        if not isinstance(characters, list) or not all(isinstance(c, str) and len(c) == 1 for c in characters):
            raise ZooError(f"{path}: damaged tokenizer file: 'characters' must be a list of single characters")
        if len(set(characters)) != len(characters):
            raise ZooError(f"{path}: damaged tokenizer file: a character appears twice")
        return cls(characters)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"characters": self.characters}, ensure_ascii=False) + "\n", encoding="utf-8")

    def unknown_characters(self, text: str) -> list[str]:
        """The characters of ``text`` outside the vocabulary, sorted."""
        return sorted(set(text).difference(self.index))

    def encode(self, text: str, errors: str = "strict", replacement: str = "?") -> list[int]:
        """Ids of ``text``. Unknown characters are an error naming them, or with
        ``errors="replace"`` become ``replacement``."""
        unknown = sorted({c for c in text if c not in self.index})
        if unknown:
            if errors != "replace":
                shown = ", ".join(repr(c) for c in unknown[:10]) + (" …" if len(unknown) > 10 else "")
                raise ZooError(f"{len(unknown)} character(s) not in the vocabulary: {shown}")
            if replacement not in self.index:
                raise ZooError(f"replacement character {replacement!r} is not in the vocabulary")
            text = "".join(c if c in self.index else replacement for c in text)
        return [self.index[c] for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ZooError(f"token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})")
        return "".join(self.characters[i] for i in ids)


def load_char_tokenizer(spec, path: Path | None) -> CharTokenizer:
    if path is None:
        raise ZooError("tokenizer 'char' needs its vocabulary file (tokenizer.file in the card)")
    tokenizer = CharTokenizer.from_file(path)
    if tokenizer.vocab_size != spec.vocab_size:
        raise ZooError(f"{path}: tokenizer has {tokenizer.vocab_size} characters but the card says {spec.vocab_size}")
    return tokenizer


def train_char_tokenizer(text: str, vocab_size: int | None = None, train_fraction: float | None = None):
    """`zoo train-tokenizer --kind char`: seed 004's vocabulary, every character of
    the whole corpus, so that validation text never holds an unknown one
    (``vocab_size`` and ``train_fraction`` do not apply)."""
    tokenizer = CharTokenizer.from_text(text)
    return TrainedTokenizer(
        f"char-{tokenizer.vocab_size}.json",
        tokenizer.save,
        f"{tokenizer.vocab_size} characters from {len(text):,} characters",
    )
