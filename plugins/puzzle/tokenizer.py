"""The puzzle's word tokenizer: one token per word of seed 003's ten-word vocabulary.

"Flying superhero" is one word that contains a space, so text is matched
greedily: at each point the longest vocabulary entry (in whitespace-separated
pieces) wins. Matching ignores case, so the answer word "Flying Superhero" can
be typed back as a question's object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from zoo_core.errors import ZooError

from .slots import VOCABULARY


def _valid_words() -> str:
    return ", ".join(VOCABULARY)


class PuzzleTokenizer:
    def __init__(self, words: Sequence[str] = VOCABULARY):
        self.words = tuple(words)
        self.vocab_size = len(self.words)
        self._ids = {tuple(word.casefold().split()): i for i, word in enumerate(self.words)}
        self._longest = max(len(pieces) for pieces in self._ids)

    def encode(self, text: str) -> list[int]:
        pieces = text.casefold().split()
        original = text.split()
        ids: list[int] = []
        start = 0
        while start < len(pieces):
            for length in range(min(self._longest, len(pieces) - start), 0, -1):
                token_id = self._ids.get(tuple(pieces[start : start + length]))
                if token_id is not None:
                    ids.append(token_id)
                    start += length
                    break
            else:
                raise ZooError(f"unknown word '{original[start]}'; the puzzle's words are: {_valid_words()}")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        words = []
        for token_id in ids:
            token_id = int(token_id)
            if not 0 <= token_id < self.vocab_size:
                raise ZooError(f"token id {token_id} is outside the puzzle vocabulary (0..{self.vocab_size - 1})")
            words.append(self.words[token_id])
        return " ".join(words)


def load_puzzle_tokenizer(spec, path: Path | None) -> PuzzleTokenizer:
    """Factory registered as 'puzzle-words': the vocabulary is built in, so no file."""
    if path is not None:
        raise ZooError(f"tokenizer 'puzzle-words' has a built-in vocabulary and reads no file (the card names {path})")
    tokenizer = PuzzleTokenizer()
    if spec.vocab_size != tokenizer.vocab_size:
        raise ZooError(
            f"tokenizer 'puzzle-words' has {tokenizer.vocab_size} words but the card says vocab_size={spec.vocab_size}"
        )
    return tokenizer
