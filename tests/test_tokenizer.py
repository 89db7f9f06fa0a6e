"""The byte-level BPE tokenizer: tiktoken encoding over ranks the zoo trains itself."""

from __future__ import annotations

import pytest

from zoo_core.corpus.batches import split_text
from zoo_core.corpus.datasets import read_text_file
from zoo_core.errors import ZooError
from zoo_plugins.bpe.tokenizer import BPETokenizer, read_ranks, write_ranks
from zoo_plugins.bpe.training import train_bpe

from .conftest import ROOT

RANKS = ROOT / "checkpoints" / "bpe-1024.tiktoken"


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.from_file(RANKS)


def test_shipped_vocabulary_has_1024_tokens(tokenizer):
    assert tokenizer.vocab_size == 1024
    assert tokenizer.encoding.n_vocab == 1024


@pytest.mark.parametrize("text", ["ROMEO:\nWhat, ho!", "naïve café — ✓ 日本", "", "   \n\n\t", "🙂🙂"])
def test_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_common_words_are_single_tokens(tokenizer):
    assert len(tokenizer.encode(" the")) == 1
    assert len(tokenizer.encode("First Citizen:")) < len("First Citizen:") / 2


def test_invalid_utf8_decodes_with_replacement(tokenizer):
    ids = tokenizer.encode("é")  # two bytes, two tokens or one
    assert tokenizer.decode([tokenizer.encode("é")[0]] if len(ids) > 1 else [0xC3]) == "\ufffd"


def test_decode_rejects_ids_outside_the_vocabulary(tokenizer):
    with pytest.raises(ZooError, match="token id 1024 is outside the vocabulary"):
        tokenizer.decode([1, 1024])


def test_training_is_deterministic_and_readable_by_tiktoken(tmp_path):
    text = "the cat sat on the mat; the cat ate the rat. " * 20
    ranks = train_bpe(text, 270)
    assert ranks == train_bpe(text, 270)
    assert len(ranks) == 270 and b" the" in ranks and b" cat" in ranks
    write_ranks(ranks, tmp_path / "r.tiktoken")
    assert read_ranks(tmp_path / "r.tiktoken") == ranks
    tokenizer = BPETokenizer(ranks)
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.encode(" the cat ate") == [ranks[b" the"], ranks[b" cat"], ranks[b" ate"]]


@pytest.mark.parametrize(
    "content, message",
    [("not base64 !\n", "is not 'base64 rank'"), ("QQ== 0\nQQ== 1\n", "repeats a token"), ("QQ== 5\n", "not 0..0 without gaps")],
)
def test_damaged_ranks_files_are_refused(tmp_path, content, message):
    path = tmp_path / "bad.tiktoken"
    path.write_text(content)
    with pytest.raises(ZooError, match=message):
        read_ranks(path)


@pytest.mark.slow
def test_shipped_ranks_are_retrainable_from_the_training_split():
    train_text, _ = split_text(read_text_file(ROOT / "data" / "tinyshakespeare.txt").text, 0.9)
    assert train_bpe(train_text, 1024) == read_ranks(RANKS)
