"""What the tests' tiny Hugging Face models share: a byte-level BPE tokenizer trained
here on Tiny Shakespeare, Llama 3's RoPE scaling at a tiny model's size, and the
comparison of a transformers model with the zoo's on a left-padded batch."""

from __future__ import annotations

import functools

import torch

from zoo_core.corpus.datasets import read_text_file

from .conftest import ROOT

# Qwen2's special tokens, which its ChatML chat template writes around each message.
CHATML_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}


@functools.cache
def byte_level_tokenizer(*special_tokens: str):
    """GPT-2's byte-level BPE, 300 tokens learnt from the corpus's first 50,000
    characters, ``special_tokens`` first. Built once per set of special tokens:
    callers save or wrap it, never change it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(special_tokens),
        show_progress=False,
    )
    text = read_text_file(ROOT / "data" / "tinyshakespeare.txt").text
    tokenizer.train_from_iterator([text[:50_000]], trainer)
    return tokenizer


def left_padded(rows: list[list[int]]):
    """ids, attention mask and positions of rows left-padded to one length (pad id 0)."""
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def largest_difference(hf_model, zoo_network, rows: list[list[int]]) -> float:
    """transformers on the left-padded batch against the zoo on each row alone, over the real tokens."""
    ids, mask, positions = left_padded(rows)
    with torch.no_grad():
        theirs = hf_model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        worst = 0.0
        for r, row in enumerate(rows):
            ours, _ = zoo_network(torch.tensor([row]))
            worst = max(worst, float((theirs[r, -len(row) :] - ours[0]).abs().max()))
    return worst
