"""Bits per byte: scores that compare across tokenizers, on identical text."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch.nn import functional as F

import zoo_core
from zoo_core.evaluation.bits import bits_per_byte, summed_nll


@pytest.fixture(scope="module")
def char_model():
    return zoo_core.load("gpt-char-mini")


def test_sliding_windows_score_every_token_once_like_one_pass(char_model):
    """Within one context the sliding score is the plain full-window NLL; past it
    every token is still scored exactly once."""
    ids = char_model.tokenizer.encode("ROMEO:\nO, she doth teach the torches to burn bright! It seems she hangs")
    network = char_model.network
    with torch.no_grad():
        logits, _ = network(torch.tensor([ids[:64]]))
    direct = -float(F.log_softmax(logits[0, :-1], -1).gather(1, torch.tensor(ids[1:64])[:, None]).sum())
    assert summed_nll(network, ids[:64], 1, 64) == pytest.approx(direct, rel=1e-5)
    # Past the context, a model that knows nothing (every logit equal) shows
    # that each token from `first` on is scored exactly once: ln V apiece.
    class Uniform(torch.nn.Module):
        def forward(self, idx):
            assert idx.shape[1] <= 64  # never more than the context window
            return torch.zeros(*idx.shape, 65), None

    for first in (1, 5, 64, 70):
        assert summed_nll(Uniform(), ids, first, 64) == pytest.approx((len(ids) - first) * math.log(65))


def test_bits_are_nats_over_ln2_per_byte(char_model):
    text, before = "Speak, speak.\n", "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\n"
    score = bits_per_byte(char_model, text, before)
    assert score["bytes"] == score["characters"] == score["tokens"] == len(text)
    assert score["bits_per_byte"] == pytest.approx(score["nats_per_token"] / math.log(2), rel=1e-6)
    # A byte-level model on non-ASCII text: per byte and per character differ.
    bpe = zoo_core.load("transformer-1b-learned-ctx8")
    accented = bits_per_byte(bpe, "café à la crème", before)
    assert accented["bytes"] == 18 and accented["characters"] == 15
    assert accented["bits_per_character"] == pytest.approx(accented["bits_per_byte"] * 18 / 15)


def test_compare_across_tokenizers_scores_identical_text_in_bits_per_byte(zoo):
    result = zoo("compare", "gpt-char-mini", "transformer-6b-sin", "--text-chars", "3000", "--max-new-tokens", "5", "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["unit"] == "bits per byte" and "different tokenizers" in report["reason"]
    assert "own tokenizer" in report["method"]
    char, bpe = report["models"]
    assert char["bytes"] == bpe["bytes"] == 3000 and char["tokens"] == 3000 and bpe["tokens"] < 2000
    assert 1.0 < char["bits_per_byte"] < 4.0 and 1.0 < bpe["bits_per_byte"] < 4.0
    assert bpe["bits_per_byte_delta"] == pytest.approx(bpe["bits_per_byte"] - char["bits_per_byte"])
    text = zoo("compare", "gpt-char-mini", "transformer-6b-sin", "--text-chars", "3000", "--max-new-tokens", "5")
    assert "method: each model tokenizes the scored text" in text.out and "bits/byte" in text.out


def test_eval_reports_and_records_bits_per_byte(zoo, private_catalogue):
    result = zoo("eval", "transformer-1b-learned-ctx8", "--windows", "8", "--text-chars", "2000", "--json")
    report = json.loads(result.out)
    assert report["bits_scored_characters"] == 2000 and 1.0 < report["validation_bits_per_byte"] < 4.0
    assert zoo("eval", "transformer-1b-learned-ctx8", "--record", "--text-chars", "9").code == 1
    # --record scores the whole validation text: the smallest model keeps it quick.
    assert zoo("eval", "bigram", "--windows", "8", "--record").code == 0
    card = zoo_core.get_variant("bigram").card
    assert 1.0 < card.metrics.validation_bits_per_byte < 4.0
    assert zoo("load", "bigram").code == 0  # the checkpoint's header card still agrees
    assert zoo("verify", "bigram").code == 0


def test_record_never_rewrites_a_card_inside_an_installed_package(zoo, private_catalogue, monkeypatch, tmp_path):
    import re
    import shlex
    import sysconfig

    # The private copy of the catalogue stands for the zoo's wheel: its folder is site-packages.
    site = private_catalogue.parent
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {"purelib": str(site), "platlib": str(site)})
    monkeypatch.chdir(tmp_path)
    before = private_catalogue.read_bytes()
    refused = zoo("eval", "bigram", "--record")
    assert refused.code == 1 and refused.err.count("\n") == 1 and "inside an installed package" in refused.err
    assert private_catalogue.read_bytes() == before
    # What the line says to do runs, and records on the copy, in the user's catalogue.
    for command in re.findall(r"`(zoo [^`]+)`", refused.err)[1:]:
        args = shlex.split(command)[1:]
        done = zoo(*args, *(("--windows", "8") if args[0] == "eval" else ()))
        assert done.code == 0, (command, done.err)
    assert private_catalogue.read_bytes() == before
    assert 1.0 < zoo_core.get_variant("my-bigram").card.metrics.validation_bits_per_byte < 4.0
    assert zoo_core.get_variant("my-bigram").layer == "user"


def test_with_a_bos_every_window_opens_with_it_as_llama_cpps_perplexity_does(char_model):
    """For a tokenizer that puts BOS first, each window is BOS then the text's tokens
    (llama.cpp's perplexity puts BOS at each chunk's start): within one window the score
    is the plain NLL of BOS followed by the history, and past it every window the network
    reads starts with BOS, holds at most the context, and scores each token once."""
    ids = char_model.tokenizer.encode("ROMEO:\nO, she doth teach the torches to burn bright! It seems she hangs")
    bos = next(i for i in range(65) if i not in ids)  # the character model has none: one the text lacks stands in
    network = char_model.network
    with torch.no_grad():  # mid-document history of 10 tokens, one window: BOS first, then all of it
        logits, _ = network(torch.tensor([[bos, *ids[:40]]]))
    direct = -float(F.log_softmax(logits[0, 10:-1], -1).gather(1, torch.tensor(ids[10:40])[:, None]).sum())
    assert summed_nll(network, ids[:40], 10, 64, bos_id=bos) == pytest.approx(direct, rel=1e-5)
    assert summed_nll(network, ids[:40], 10, 64, bos_id=None) != pytest.approx(direct, rel=1e-5)

    read = []

    class Uniform(torch.nn.Module):
        def forward(self, idx):
            read.extend(idx.tolist())
            return torch.zeros(*idx.shape, 65), None

    for text, first in ((ids, 1), (ids, 5), (ids, 16), ([bos, *ids], 1)):
        read.clear()
        assert summed_nll(Uniform(), text, first, 16, bos_id=bos) == pytest.approx((len(text) - first) * math.log(65))
        assert all(row[0] == bos and len(row) <= 16 for row in read)
        assert sum(row.count(bos) for row in read) == len(read)  # one BOS a row, never twice
