"""The streaming text behind `zoo serve`: pieces that join to exactly the text
`generate` gives for the same seed, whatever the tokenizer; a stop event ends it;
models load once. (Greedy, top-k and top-p themselves: tests/test_sampling_options.py.)"""

from __future__ import annotations

import threading

import pytest

import zoo_core
from zoo_core.inference.sampling import stream_text
from zoo_core.web.generation import ModelCache


@pytest.fixture(scope="module")
def bpe_model():
    return zoo_core.load("transformer-1b-learned-ctx8")


@pytest.fixture(scope="module")
def char_model():
    return zoo_core.load("gpt-char-mini")


@pytest.mark.parametrize("fixture, prompt", [("bpe_model", "ROMEO: é—"), ("char_model", "JULIET:")])
def test_streamed_pieces_join_to_generate(request, fixture, prompt):
    model = request.getfixturevalue(fixture)
    pieces = list(stream_text(model.network, model.tokenizer, model.encode_prompt(prompt), max_new_tokens=50,
                              temperature=1.3, seed=5))
    full = model.generate(prompt, 50, temperature=1.3, seed=5)
    prompt_text = model.tokenizer.decode(model.tokenizer.encode(prompt))
    assert prompt_text + "".join(pieces) == full
    assert len(pieces) > 10 and all(pieces)


def test_stop_event_ends_the_stream(bpe_model):
    stop = threading.Event()
    usage = {}
    pieces = []
    ids = bpe_model.encode_prompt("ROMEO:")
    for piece in stream_text(bpe_model.network, bpe_model.tokenizer, ids, max_new_tokens=10_000, seed=1, cancel=stop,
                             usage=usage):
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
