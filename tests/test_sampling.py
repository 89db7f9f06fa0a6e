"""Sampling: seeded, cropped to the window, and strict about its arguments."""

from __future__ import annotations

import pytest
import torch

import zoo_core
from zoo_core.errors import ZooError
from zoo_core.inference.sampling import sample_tokens


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
        (["--prompt", "x", "--min-p", "-0.1"], "--min-p must be from 0 to 1"),
        (["--prompt", "x", "--min-p", "1.5"], "--min-p must be from 0 to 1"),
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


def expected_positions(prompt_length: int, window: int, new_tokens: int, cached: bool) -> tuple[int, int]:
    """Positions (per sequence) the network must process to sample ``new_tokens``,
    and how many forward calls go through the cache: uncached, the cropped
    window every step; cached, the prompt's window once, then one token a step
    until the window is full, then the whole window again (uncached)."""
    total, cache_length, cache_calls = 0, 0, 0
    for step in range(new_tokens):
        length = prompt_length + step
        if cached and step == 0:
            cache_length = min(length, window)
            total, cache_calls = total + cache_length, cache_calls + 1
        elif cached and cache_length < window:
            cache_length += 1
            total, cache_calls = total + 1, cache_calls + 1
        else:
            total += min(length, window)
    return total, cache_calls


def count_positions(network) -> tuple[dict, object]:
    """Count the positions each forward call feeds the network (per sequence)."""
    seen = {"positions": 0, "cache_calls": 0}

    def hook(module, args, kwargs):
        idx = args[0] if args else kwargs["idx"]
        seen["positions"] += idx.shape[1]
        seen["cache_calls"] += kwargs.get("cache") is not None

    return seen, network.register_forward_pre_hook(hook, with_kwargs=True)


CACHE_CASES = [("transformer-6b-sin", 32), ("transformer-4b-learned-ctx128", 128), ("transformer-1b-learned-post-ctx8", 8)]


@pytest.mark.parametrize("prompt_kind", ["shorter than the window", "longer than the window"])
@pytest.mark.parametrize("name, window", CACHE_CASES)
def test_kv_cache_gives_the_uncached_tokens_and_is_really_used(name, window, prompt_kind):
    from .conftest import ROOT

    model = zoo_core.load(name)
    assert model.card.context_length == window
    tokens = model.tokenizer.encode((ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:20_000])
    length = 3 if prompt_kind.startswith("shorter") else window + 5
    prompts = torch.tensor([tokens[:length], tokens[1000 : 1000 + length]])  # a batch of two prompts
    new_tokens = window + 10  # fills the window, then runs past it
    kwargs = dict(max_new_tokens=new_tokens, temperature=0.9, top_k=40)
    counts = {}
    outputs = {}
    for cached in (True, False):
        seen, handle = count_positions(model.network)
        try:
            outputs[cached] = sample_tokens(model.network, prompts, generator=torch.Generator().manual_seed(11), use_cache=cached, **kwargs)
        finally:
            handle.remove()
        counts[cached] = seen["positions"], seen["cache_calls"]
    assert torch.equal(outputs[True], outputs[False])
    assert counts[False] == expected_positions(length, window, new_tokens, cached=False)
    # The cache was used: exactly the positions and cached calls cached decoding needs.
    assert counts[True] == expected_positions(length, window, new_tokens, cached=True), counts
    if length < window:  # a prompt shorter than the window: one token a step instead of the whole window
        assert counts[True][0] < counts[False][0] and counts[True][1] == window - length + 1


def test_cached_logits_match_the_full_forward(model):
    ids = torch.tensor([model.tokenizer.encode("To be, or not to be, that is the question")])
    full, _ = model.network(ids)
    cache = model.network.make_cache()
    first, _ = model.network(ids[:, :5], cache=cache)
    steps = [model.network(ids[:, t : t + 1], cache=cache)[0] for t in range(5, ids.shape[1])]
    torch.testing.assert_close(torch.cat([first, *steps], dim=1), full, rtol=1e-4, atol=1e-5)
