"""The completions API as clients use it: the official `openai` package against a real
`zoo serve`, requests batched continuously, each answer checked against what
`zoo sample` (or the Python API behind it) draws for the same prompt and seed."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess

import pytest

httpx = pytest.importorskip("httpx", reason="the web tests need the web extra: pip install 'zoo-lm[web]' httpx")
pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
openai = pytest.importorskip("openai", reason="these tests need the web-test extra: pip install 'zoo-lm[web-test]'")

from tests.web_support import SMALL, ZOO, Server  # noqa: E402

MINI = "gpt-char-mini"  # context 64: long requests run past the window
ROPE = "gpt-char-mini-rope"


@pytest.fixture(scope="module")
def server():
    server = Server("--max-concurrent", "8", "--max-queue", "8")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300) as client:
        yield client


_models: dict = {}


def _sample(name: str, prompt: str, **settings) -> list:
    """What the Python API behind `zoo sample` draws (one Sample per row)."""
    from zoo_core.loading.api import load

    if name not in _models:
        _models[name] = load(name)
    return _models[name].sample(prompt, **settings)


def _zoo_sample_json(name: str, prompt: str, *options: str) -> dict:
    done = subprocess.run([*ZOO, "sample", name, "--prompt", prompt, "--json", *options],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# Prompts of different lengths, seeds and lengths of answer, some past the context
# window, on models that batch (learned positions, RoPE), one whose window is
# 8 tokens (most of its tokens are recomputed over the window, rows of one length
# together) and the bigram, which has no cache.
CONCURRENT = [
    (MINI, "ROMEO:", 1, 40, {}),
    (MINI, "First Citizen:\nBefore we proceed", 2, 90, {}),
    (MINI, "K", 3, 25, {"temperature": 0.7}),
    (MINI, "JULIET:\nO Romeo, Romeo", 4, 70, {"top_k": 5}),
    (MINI, "What say you?", 5, 3, {}),
    (ROPE, "MENENIUS:", 6, 75, {}),
    (ROPE, "Th", 7, 30, {"top_p": 0.9}),
    (SMALL, "KING", 8, 20, {"min_p": 0.05}),
    ("bigram", "ROMEO:", 9, 20, {}),  # no cache: every token recomputed over its window
]


def test_concurrent_requests_get_what_zoo_sample_draws(server):
    async def ask_all():
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                                      timeout=300) as client:
            return await asyncio.gather(*[
                # top_k and min_p are the zoo's own: the client sends them in extra_body
                client.completions.create(model=name, prompt=prompt, seed=seed, max_tokens=tokens,
                                          **{k: v for k, v in extra.items() if k not in ("top_k", "min_p")},
                                          extra_body={k: v for k, v in extra.items() if k in ("top_k", "min_p")})
                for name, prompt, seed, tokens, extra in CONCURRENT
            ])

    answers = asyncio.run(ask_all())
    for (name, prompt, seed, tokens, extra), answer in zip(CONCURRENT, answers):
        (expected,) = _sample(name, prompt, seed=seed, max_new_tokens=tokens, **extra)
        assert answer.choices[0].text == expected.text, (name, prompt, seed)
        assert answer.usage.completion_tokens == tokens
        assert answer.usage.prompt_tokens == len(expected.prompt_tokens)


def test_n_stop_logprobs_and_echo_are_what_zoo_sample_json_gives(client):
    expected = _zoo_sample_json(MINI, "ROMEO:", "--seed", "11", "--num-samples", "3", "--max-new-tokens", "60",
                                "--stop", "\n", "--stop", "the")["samples"]
    answer = client.completions.create(model=MINI, prompt="ROMEO:", n=3, seed=11, max_tokens=60,
                                       stop=["\n", "the"], logprobs=5, echo=True)
    assert [choice.index for choice in answer.choices] == [0, 1, 2]
    for choice, sample in zip(answer.choices, expected):
        assert choice.text == "ROMEO:" + sample["text"]
        assert choice.finish_reason == ("stop" if sample["finish_reason"] == "stop" else "length")
        logprobs = choice.logprobs
        # The echoed prompt's tokens, then the completion's: their text is the choice's text.
        assert "".join(logprobs.tokens) == choice.text
        assert logprobs.text_offset == [len("".join(logprobs.tokens[:i])) for i in range(len(logprobs.tokens))]
        assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
        for token, chosen, top in zip(logprobs.tokens[1:], logprobs.token_logprobs[1:], logprobs.top_logprobs[1:]):
            assert len(top) == 5 and chosen <= 0
            assert token not in top or math.isclose(top[token], chosen, abs_tol=1e-5)
    assert any(choice.finish_reason == "stop" for choice in answer.choices)
    assert answer.usage.completion_tokens == sum(len(sample["tokens"]) for sample in expected)
    assert answer.usage.prompt_tokens == len(expected[0]["prompt_tokens"])
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens


def test_generated_logprobs_are_the_scores_of_the_same_text(client):
    drawn = client.completions.create(model=MINI, prompt="ROMEO:", seed=5, max_tokens=30, logprobs=0)
    text = "ROMEO:" + drawn.choices[0].text
    scored = client.completions.create(model=MINI, prompt=text, max_tokens=0, echo=True, logprobs=0)
    assert scored.choices[0].text == text and scored.usage.completion_tokens == 0
    prompt_tokens = len("ROMEO:")  # one character, one token
    for generated, again in zip(drawn.choices[0].logprobs.token_logprobs,
                                scored.choices[0].logprobs.token_logprobs[prompt_tokens:]):
        assert math.isclose(generated, again, abs_tol=1e-4)


def test_a_scored_text_past_the_window_agrees_with_zoo_eval(client):
    from zoo_core.evaluation.bits import summed_nll
    from zoo_core.loading.api import load

    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 3
    scored = client.completions.create(model=MINI, prompt=text, max_tokens=0, echo=True, logprobs=1)
    token_logprobs = scored.choices[0].logprobs.token_logprobs
    assert token_logprobs[0] is None and len(token_logprobs) == len(text)
    model = load(MINI)
    nats = summed_nll(model.network, model.tokenizer.encode(text), 1, model.card.context_length)
    assert math.isclose(-sum(token_logprobs[1:]), nats, rel_tol=1e-5)


def test_streaming_with_the_openai_client(client):
    request = dict(model=MINI, prompt="JULIET:", seed=9, max_tokens=50, n=2, stop="\n\n", logprobs=2)
    whole = client.completions.create(**request)
    texts, tokens, reasons = {0: "", 1: ""}, {0: [], 1: []}, {}
    chunks = 0
    for chunk in client.completions.create(**request, stream=True, stream_options={"include_usage": True}):
        chunks += 1
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            tokens[choice.index] += choice.logprobs.tokens if choice.logprobs else []
            if choice.finish_reason:
                reasons[choice.index] = choice.finish_reason
        if chunk.usage:
            assert chunk.usage.completion_tokens == whole.usage.completion_tokens
    assert chunks > 10  # it streamed
    for choice in whole.choices:
        assert texts[choice.index] == choice.text
        assert tokens[choice.index] == choice.logprobs.tokens
        assert reasons[choice.index] == choice.finish_reason
    (first, second) = _sample(MINI, "JULIET:", seed=9, max_new_tokens=50, num_samples=2, stop="\n\n")
    assert [texts[0], texts[1]] == [first.text, second.text]


def test_async_streaming(server):
    async def stream(seed: int) -> str:
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                                      timeout=300) as client:
            pieces = []
            async for chunk in await client.completions.create(model=ROPE, prompt="Good morrow", seed=seed,
                                                                max_tokens=40, stream=True, echo=True):
                pieces += [choice.text for choice in chunk.choices]
            return "".join(pieces)

    async def both():
        return await asyncio.gather(stream(1), stream(2))

    for seed, text in zip((1, 2), asyncio.run(both())):
        (expected,) = _sample(ROPE, "Good morrow", seed=seed, max_new_tokens=40)
        assert text == "Good morrow" + expected.text


@pytest.mark.parametrize(
    "change, words",
    [
        ({"max_tokens": True}, ["max_tokens", "integer"]),
        ({"temperature": "1"}, ["temperature", "number"]),
        ({"seed": 1.0}, ["seed", "integer"]),
        ({"n": False}, ["'n'"]),
        ({"echo": "yes"}, ["echo"]),
        ({"suffix": "end"}, ["suffix", "not supported"]),
        ({"max_tokens": 0}, ["max_tokens", "echo"]),
        ({"logprobs": 21}, ["logprobs"]),
        ({"stop": ["a", "b", "c", "d", "e"]}, ["stop"]),
        ({"n": 100}, ["'n'", "at most 16"]),
        ({"best_of": 3}, ["best_of"]),
    ],
)
def test_types_are_strict_and_refusals_clear(server, change, words):
    response = httpx.post(server.url + "/v1/completions", json={"model": MINI, "prompt": "a", **change}, timeout=60)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "\n" not in message
    for word in words:
        assert word in message


def test_the_queue_bounds_waiting_rows_and_429_comes_only_past_it():
    server = Server("--max-concurrent", "2", "--max-queue", "2", "--max-tokens-limit", "100000")
    clients = [httpx.Client(timeout=120) for _ in range(2)]
    long = {"model": SMALL, "prompt": "ROMEO:", "max_tokens": 100000, "stream": True, "n": 2}
    try:
        streams = [client.stream("POST", server.url + "/v1/completions", json=long) for client in clients]
        responses = [stream.__enter__() for stream in streams]
        # Two rows run, two wait (their request is accepted and streams once there is room).
        assert [response.status_code for response in responses] == [200, 200]
        lines = responses[0].iter_lines()  # kept: a dropped iterator closes its stream
        next(lines)
        refused = httpx.post(server.url + "/v1/completions", json={"model": SMALL, "prompt": "a", "max_tokens": 2},
                             timeout=60)
        assert refused.status_code == 429
        assert refused.json()["error"]["limit"] == "max_queued_generations"
        for stream in streams:
            stream.__exit__(None, None, None)
    finally:
        for client in clients:
            client.close()
        server.stop()


def test_rows_past_the_batch_size_wait_and_join_as_others_leave(client):
    # Twelve rows for batches of eight, of different lengths (a stop string ends some
    # early): the last four join the running batch as places free up.
    answer = client.completions.create(model=MINI, prompt="KING RICHARD:", n=12, seed=40, max_tokens=45, stop=" the")
    expected = _sample(MINI, "KING RICHARD:", seed=40, max_new_tokens=45, num_samples=12, stop=" the")
    assert [choice.text for choice in answer.choices] == [sample.text for sample in expected]
    assert answer.usage.completion_tokens == sum(len(sample.tokens) for sample in expected)
