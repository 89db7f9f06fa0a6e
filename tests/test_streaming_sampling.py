"""The streaming sampler behind `zoo serve`: the same draws as `generate`,
greedy at temperature 0, nucleus (top-p) sampling, and text streamed in pieces
that join to exactly the generated text, whatever the tokenizer."""

from __future__ import annotations

import threading

import pytest
import torch

import zoo_core
from zoo_core.errors import ZooError
from zoo_core.sampling import sample_tokens, stream_tokens
from zoo_core.web.generation import ModelCache, stream_text


@pytest.fixture(scope="module")
def bpe_model():
    return zoo_core.load("transformer-1b-learned-ctx8")


@pytest.fixture(scope="module")
def char_model():
    return zoo_core.load("gpt-char-mini")


def _ids(model, text):
    return torch.tensor([model.tokenizer.encode(text)])


def test_stream_yields_the_tokens_sample_tokens_returns(bpe_model):
    ids = _ids(bpe_model, "ROMEO:")
    whole = sample_tokens(bpe_model.network, ids, 20, 0.9, 30, torch.Generator().manual_seed(4))
    steps = list(stream_tokens(bpe_model.network, ids, 20, 0.9, 30, None, torch.Generator().manual_seed(4)))
    assert len(steps) == 20 and all(step.shape == (1, 1) for step in steps)
    assert torch.equal(torch.cat((ids, *steps), dim=1), whole)


def test_temperature_zero_is_greedy_and_ignores_the_seed(bpe_model):
    ids = _ids(bpe_model, "KING")
    runs = [torch.cat((ids, *stream_tokens(bpe_model.network, ids, 12, temperature=0, generator=torch.Generator().manual_seed(s))), dim=1)
            for s in (1, 2)]
    assert torch.equal(runs[0], runs[1])
    expected = ids
    for _ in range(12):  # argmax by hand, token by token
        logits, _ = bpe_model.network(expected[:, -bpe_model.card.context_length:])
        expected = torch.cat((expected, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(runs[0], expected)


def test_top_p(bpe_model):
    ids = _ids(bpe_model, "ROMEO:")

    def draw(top_p, seed=9):
        return sample_tokens(bpe_model.network, ids, 15, top_p=top_p, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(draw(1.0), draw(None))  # the whole mass: plain sampling, same draws
    greedy = torch.cat((ids, *stream_tokens(bpe_model.network, ids, 15, temperature=0)), dim=1)
    assert torch.equal(draw(1e-9), greedy)  # only the best token
    # A middle nucleus never draws a token outside it.
    logits, _ = bpe_model.network(ids)
    probabilities = torch.softmax(logits[0, -1].float(), -1)
    ordered, order = torch.sort(probabilities, descending=True)
    nucleus = set(order[: int((torch.cumsum(ordered, 0) < 0.5).sum()) + 1].tolist())
    firsts = {sample_tokens(bpe_model.network, ids, 1, top_p=0.5, generator=torch.Generator().manual_seed(s))[0, -1].item()
              for s in range(40)}
    assert firsts <= nucleus and len(nucleus) < 1024


@pytest.mark.parametrize("top_p", [0, -0.1, 1.5, float("nan")])
def test_bad_top_p_is_refused(bpe_model, top_p):
    with pytest.raises(ZooError, match="top_p"):
        sample_tokens(bpe_model.network, _ids(bpe_model, "a"), 1, top_p=top_p)


@pytest.mark.parametrize("fixture, prompt", [("bpe_model", "ROMEO: é—"), ("char_model", "JULIET:")])
def test_streamed_pieces_join_to_generate(request, fixture, prompt):
    model = request.getfixturevalue(fixture)
    pieces = list(stream_text(model, prompt, 50, temperature=1.3, seed=5))
    full = model.generate(prompt, 50, temperature=1.3, seed=5)
    prompt_text = model.tokenizer.decode(model.tokenizer.encode(prompt))
    assert prompt_text + "".join(pieces) == full
    assert len(pieces) > 10 and all(pieces)


def test_stop_event_ends_the_stream(bpe_model):
    stop = threading.Event()
    usage = {}
    pieces = []
    for piece in stream_text(bpe_model, "ROMEO:", 10_000, seed=1, stop=stop, usage=usage):
        pieces.append(piece)
        if usage["completion_tokens"] >= 5:
            stop.set()
    assert usage["completion_tokens"] == 5


def test_model_cache_loads_once_across_threads():
    cache = ModelCache()
    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.get("bigram"))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 4 and all(model is got[0] for model in got)
    assert cache.loaded() == ["bigram"]
