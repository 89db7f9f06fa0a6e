"""A byte-level BPE tokenizer stored in tiktoken's ranks format.

The ranks file has one line per token, ``base64(token bytes) rank``, ranks
0..255 being the single bytes; that is the format tiktoken's own encodings use,
so `tiktoken.Encoding` does all encoding and decoding.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Sequence

import tiktoken

from zoo_core.errors import ZooError
from zoo_core.storage.files import read_limited

# GPT-2's pre-tokenisation: words with their leading space, numbers, punctuation
# runs and whitespace are split apart before merging, so merges never cross them.
SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# tiktoken's largest published vocabulary (200k tokens) takes under 4 MB.
MAX_RANKS_BYTES = 64 * 1024 * 1024


def read_ranks(path: Path) -> dict[bytes, int]:
    """Parse a ranks file, refusing anything that is not a complete byte-level vocabulary."""
    try:
        lines = read_limited(path, MAX_RANKS_BYTES, "tokenizer file").splitlines()
    except OSError as exc:
        raise ZooError(f"{path}: cannot read tokenizer file: {exc.strerror or exc}") from None
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            encoded, rank_text = line.split()
            token, rank = base64.b64decode(encoded, validate=True), int(rank_text)
        except (ValueError, binascii.Error):
            raise ZooError(f"{path}: damaged tokenizer file: line {number} is not 'base64 rank'") from None
        if token in ranks:
            raise ZooError(f"{path}: damaged tokenizer file: line {number} repeats a token")
        ranks[token] = rank
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ZooError(f"{path}: damaged tokenizer file: ranks are not 0..{len(ranks) - 1} without gaps")
    if any(ranks.get(bytes([b])) != b for b in range(256)):
        raise ZooError(f"{path}: damaged tokenizer file: ranks 0..255 must be the 256 single bytes")
    return ranks


def write_ranks(ranks: dict[bytes, int], path: Path) -> None:
    lines = [
        f"{base64.b64encode(token).decode('ascii')} {rank}"
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])
    ]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")


class BPETokenizer:
    """Byte-level BPE: every string encodes, every id sequence decodes."""

    def __init__(self, ranks: dict[bytes, int], name: str = "zoo-bpe"):
        self.encoding = tiktoken.Encoding(name=name, pat_str=SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens={})
        self.vocab_size = len(ranks)

    @classmethod
    def from_file(cls, path: Path) -> "BPETokenizer":
        return cls(read_ranks(path), name=path.stem)

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(text)

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ZooError(f"token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})")
        # Sampled ids can split a multi-byte character; show U+FFFD rather than fail.
        return self.encoding.decode(ids, errors="replace")


def load_bpe_tokenizer(spec, path: Path | None) -> BPETokenizer:
    """Factory registered as 'bpe': the card's ``tokenizer.file`` holds the ranks."""
    if path is None:
        raise ZooError("tokenizer 'bpe' needs a ranks file (tokenizer.file in the card)")
    tokenizer = BPETokenizer.from_file(path)
    if tokenizer.vocab_size != spec.vocab_size:
        raise ZooError(f"{path}: tokenizer has {tokenizer.vocab_size} tokens but the card says {spec.vocab_size}")
    return tokenizer
