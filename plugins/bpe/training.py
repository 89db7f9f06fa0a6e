"""Training a byte-level BPE vocabulary.

Text is split with the same pattern tiktoken uses for encoding, identical chunks
are counted once, and the most frequent adjacent pair is merged until the
vocabulary is full. Pair counts are updated incrementally, touching only the
chunks that contain the merged pair, which keeps 768 merges over Tiny
Shakespeare to a few seconds.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import regex

from zoo_core.corpus.batches import split_text
from zoo_core.corpus.tokenizer_training import TrainedTokenizer

from .tokenizer import SPLIT_PATTERN, write_ranks


def _pairs(word: list[int]):
    return zip(word, word[1:])


def train_bpe(text: str, vocab_size: int) -> dict[bytes, int]:
    """Mergeable ranks (token bytes -> rank) for ``text``; deterministic."""
    if vocab_size < 256:
        raise ValueError("a byte-level vocabulary needs at least 256 tokens")
    chunk_counts = Counter(chunk.encode("utf-8") for chunk in regex.findall(SPLIT_PATTERN, text))
    words = [list(chunk) for chunk in chunk_counts]
    frequencies = list(chunk_counts.values())

    vocabulary: list[bytes] = [bytes([b]) for b in range(256)]
    ranks = {token: rank for rank, token in enumerate(vocabulary)}
    pair_counts: Counter[tuple[int, int]] = Counter()
    words_with_pair: defaultdict[tuple[int, int], set[int]] = defaultdict(set)
    for index, word in enumerate(words):
        for pair in _pairs(word):
            pair_counts[pair] += frequencies[index]
            words_with_pair[pair].add(index)

    while len(vocabulary) < vocab_size and pair_counts:
        # Ties go to the pair whose bytes sort first, so the result never depends
        # on dictionary order.
        best = max(pair_counts, key=lambda p: (pair_counts[p], tuple(-x for x in vocabulary[p[0]] + vocabulary[p[1]])))
        if pair_counts[best] < 2:
            break
        merged_bytes = vocabulary[best[0]] + vocabulary[best[1]]
        if merged_bytes in ranks:  # reached before by another merge order
            new_id = ranks[merged_bytes]
        else:
            new_id = len(vocabulary)
            vocabulary.append(merged_bytes)
            ranks[merged_bytes] = new_id
        for index in list(words_with_pair[best]):
            word, frequency = words[index], frequencies[index]
            for pair in _pairs(word):
                pair_counts[pair] -= frequency
                if pair_counts[pair] <= 0:
                    del pair_counts[pair]
            merged: list[int] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    merged.append(new_id)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            words[index] = merged
            for pair in _pairs(merged):
                pair_counts[pair] += frequency
                words_with_pair[pair].add(index)
        pair_counts.pop(best, None)
        words_with_pair.pop(best, None)
    return ranks


def train_tokenizer(text: str, vocab_size: int, train_fraction: float):
    """`zoo train-tokenizer --kind bpe`: ranks from the training split only
    (BPE never sees validation text)."""
    train_text, _ = split_text(text, train_fraction)
    ranks = train_bpe(train_text, vocab_size)
    return TrainedTokenizer(
        f"bpe-{vocab_size}.tiktoken",
        lambda path: write_ranks(ranks, path),
        f"{len(ranks)} tokens trained on {len(train_text):,} characters",
    )
