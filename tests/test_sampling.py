"""Sampling: seeded, cropped to the window, and strict about its arguments."""

from __future__ import annotations

import pytest
import torch

import zoo_core
from zoo_core.errors import ZooError
from zoo_core.sampling import sample_tokens


@pytest.fixture(scope="module")
def model():
    return zoo_core.load("transformer-6b-sin")


def test_same_seed_same_text(model):
    first = model.generate("ROMEO:", max_new_tokens=40, seed=7)
    assert first == model.generate("ROMEO:", max_new_tokens=40, seed=7)
    assert first != model.generate("ROMEO:", max_new_tokens=40, seed=8)
    assert first.startswith("ROMEO:")


def test_sampling_runs_past_the_context_window(model):
    ids = torch.tensor([model.tokenizer.encode("ROMEO:")])
    out = sample_tokens(model.network, ids, max_new_tokens=3 * model.card.context_length, generator=torch.Generator().manual_seed(0))
    assert out.shape[1] == ids.shape[1] + 3 * model.card.context_length
    assert int(out.max()) < model.tokenizer.vocab_size


def test_top_k_one_is_greedy(model):
    ids = torch.tensor([model.tokenizer.encode("KING HENRY")])
    out = sample_tokens(model.network, ids, 1, top_k=1, generator=torch.Generator().manual_seed(3))
    logits, _ = model.network(ids)
    assert out[0, -1].item() == logits[0, -1].argmax().item()


def test_low_temperature_concentrates(model):
    ids = torch.tensor([model.tokenizer.encode("To be, or not")])
    draws = {sample_tokens(model.network, ids, 1, temperature=0.01, generator=torch.Generator().manual_seed(s))[0, -1].item() for s in range(5)}
    assert len(draws) == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prompt", ""], "prompt is empty"),
        (["--prompt", "x", "--temperature", "-1"], "--temperature must be 0 (greedy) or greater"),
        (["--prompt", "x", "--temperature", "nan"], "--temperature must be 0 (greedy) or greater"),
        (["--prompt", "x", "--top-p", "0"], "--top-p must be greater than 0 and at most 1"),
        (["--prompt", "x", "--num-samples", "0"], "--num-samples must be at least 1"),
        (["--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
        (["--prompt", "x", "--top-k", "0"], "--top-k must be at least 1"),
    ],
)
def test_bad_sampling_input_is_one_line(zoo, args, message):
    result = zoo("sample", "transformer-6b-sin", *args)
    assert result.code == 1
    assert result.err.count("\n") == 1 and message in result.err
    assert result.out == ""


def test_sample_cli_is_deterministic(zoo):
    args = ("sample", "bigram", "--prompt", "First Citizen:", "--max-new-tokens", "20", "--seed", "3")
    first = zoo(*args)
    assert first.code == 0 and first.out.startswith("First Citizen:")
    assert zoo(*args).out == first.out


def test_api_rejects_empty_prompt(model):
    with pytest.raises(ZooError, match="prompt is empty"):
        model.generate("")


@pytest.mark.parametrize("name, new_tokens", [("transformer-6b-sin", 80), ("transformer-4b-learned-ctx128", 40), ("transformer-1b-learned-post-ctx8", 30)])
def test_kv_cache_gives_the_uncached_tokens(name, new_tokens):
    model = zoo_core.load(name)
    first, second = model.tokenizer.encode("ROMEO: But soft, what light"), model.tokenizer.encode("JULIET: Ay me! O Romeo")
    length = min(len(first), len(second))
    prompts = torch.tensor([first[:length], second[:length]])  # a batch of two prompts
    kwargs = dict(max_new_tokens=new_tokens, temperature=0.9, top_k=40)
    cached = sample_tokens(model.network, prompts, generator=torch.Generator().manual_seed(11), use_cache=True, **kwargs)
    plain = sample_tokens(model.network, prompts, generator=torch.Generator().manual_seed(11), use_cache=False, **kwargs)
    assert torch.equal(cached, plain)


def test_cached_logits_match_the_full_forward(model):
    ids = torch.tensor([model.tokenizer.encode("To be, or not to be, that is the question")])
    full, _ = model.network(ids)
    cache = model.network.make_cache()
    first, _ = model.network(ids[:, :5], cache=cache)
    steps = [model.network(ids[:, t : t + 1], cache=cache)[0] for t in range(5, ids.shape[1])]
    torch.testing.assert_close(torch.cat([first, *steps], dim=1), full, rtol=1e-4, atol=1e-5)
