"""`zoo serve` as a user runs it: a real subprocess on a loopback port, spoken to over HTTP."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="the web tests need the web extra: pip install 'zoo-lm[web]' httpx")
pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")

from tests.web_support import SMALL, Server, zoo_sample  # noqa: E402

REGISTRY = Path(__file__).resolve().parent.parent / "registry.toml"


@pytest.fixture(scope="module")
def server():
    before = hashlib.sha256(REGISTRY.read_bytes()).hexdigest()
    # A large max_tokens limit lets one test start a generation long enough to abandon;
    # without a queue, a batch of two is the limit one test runs into.
    server = Server("--max-concurrent", "2", "--max-queue", "0", "--max-tokens-limit", "100000")
    yield server
    server.stop()
    assert hashlib.sha256(REGISTRY.read_bytes()).hexdigest() == before, "an endpoint changed the catalogue"


def _post(server, body, **kwargs):
    return httpx.post(server.url + "/v1/completions", json=body, timeout=120, **kwargs)


def _events(response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]


def test_models_lists_every_variant_with_weights(server):
    listed = {model["id"] for model in server.get_json("/v1/models")["data"]}
    assert {"bigram", SMALL, "transformer-6b-sin", "puzzle-disobeys"} <= listed
    assert "gpt-char" not in listed  # declared without published weights


def test_completion_is_what_zoo_sample_prints(server):
    settings = dict(max_tokens=25, seed=7, temperature=0.8, top_k=40)
    response = _post(server, {"model": SMALL, "prompt": "ROMEO:", **settings})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "text_completion" and body["model"] == SMALL
    assert body["usage"] == {"prompt_tokens": body["usage"]["prompt_tokens"], "completion_tokens": 25,
                             "total_tokens": body["usage"]["prompt_tokens"] + 25}
    expected = zoo_sample(SMALL, "ROMEO:", 25, seed=7, temperature=0.8, top_k=40)
    assert "ROMEO:" + body["choices"][0]["text"] == expected
    # Another seed draws something else: the seed is not ignored.
    other = _post(server, {"model": SMALL, "prompt": "ROMEO:", **settings, "seed": 8}).json()
    assert other["choices"][0]["text"] != body["choices"][0]["text"]


def test_streamed_chunks_join_to_the_same_text(server):
    request = {"model": SMALL, "prompt": "First Citizen:", "max_tokens": 30, "seed": 3}
    whole = _post(server, request).json()["choices"][0]["text"]
    with httpx.stream("POST", server.url + "/v1/completions", json={**request, "stream": True}, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    # How many chunks carry the 30 tokens is not promised: whatever arrived since the
    # client last read is joined (zoo_core.web.completions, _items), so a client slowed by
    # a loaded machine gets fewer, longer chunks. Asking for more than five failed the
    # flake hunt (seed 3858816402); that rows stream while they run is shown by the
    # held-open 100,000-token streams of test_concurrency_limit_disconnect_and_a_free_event_loop.
    assert chunks
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == whole


def test_greedy_and_nucleus_sampling(server):
    greedy = [_post(server, {"model": SMALL, "prompt": "KING", "max_tokens": 10, "temperature": 0, "seed": s}).json()
              for s in (1, 2)]
    assert greedy[0]["choices"][0]["text"] == greedy[1]["choices"][0]["text"]  # no draw, so no seed
    tiny_nucleus = _post(server, {"model": SMALL, "prompt": "KING", "max_tokens": 10, "top_p": 1e-6, "seed": 5}).json()
    assert tiny_nucleus["choices"][0]["text"] == greedy[0]["choices"][0]["text"]


def test_min_p_is_what_zoo_sample_min_p_prints(server):
    request = {"model": SMALL, "prompt": "ROMEO:", "max_tokens": 25, "seed": 7, "temperature": 1.5}
    body = _post(server, {**request, "min_p": 0.2}).json()
    assert "ROMEO:" + body["choices"][0]["text"] == zoo_sample(SMALL, "ROMEO:", 25, seed=7, temperature=1.5, min_p=0.2)
    # min_p is not ignored: without it the same seed draws other text, and min_p 1 is greedy.
    assert _post(server, request).json()["choices"][0]["text"] != body["choices"][0]["text"]
    greedy = _post(server, {**request, "temperature": 0}).json()["choices"][0]["text"]
    assert _post(server, {**request, "min_p": 1}).json()["choices"][0]["text"] == greedy


def test_task_model_answers(server):
    body = _post(server, {"model": "puzzle-disobeys", "prompt": "Crow disobeys keep-flight swap-speech he-is?"}).json()
    assert body["choices"][0]["text"].startswith("Human")
    assert body["usage"]["completion_tokens"] == 0


@pytest.mark.parametrize(
    "request_body, status, words",
    [
        ({"model": SMALL, "prompt": "a", "max_tokens": 10**9}, 400, ["max_tokens", "100000"]),
        ({"model": SMALL, "prompt": "a" * 9000}, 400, ["max_prompt_chars"]),
        ({"model": "no-such-variant", "prompt": "a"}, 404, ["no-such-variant"]),
        ({"model": "gpt-char", "prompt": "a"}, 404, ["no published weights"]),
        ({"model": SMALL, "prompt": "a", "temperature": -1}, 400, ["temperature"]),
        ({"model": SMALL, "prompt": "a", "top_p": 0}, 400, ["top_p"]),
        ({"model": SMALL, "prompt": "a", "min_p": 1.5}, 400, ["min_p"]),
        ({"model": SMALL, "prompt": "a", "n": 0}, 400, ["'n'"]),
        ({"model": SMALL, "prompt": "a", "bogus": 1}, 400, ["unsupported field 'bogus'"]),
        ({"model": SMALL}, 400, ["missing field 'prompt'"]),
        ({"model": SMALL, "prompt": ""}, 400, ["empty"]),
        ({"model": "puzzle-disobeys", "prompt": "hello there"}, 400, ["unknown word"]),
    ],
)
def test_bad_requests_get_one_clear_message(server, request_body, status, words):
    response = _post(server, request_body)
    assert response.status_code == status, response.text
    message = response.json()["error"]["message"]
    assert "\n" not in message and "Traceback" not in message
    for word in words:
        assert word in message


def test_oversized_body_names_the_limit(server):
    body = json.dumps({"model": SMALL, "prompt": "a" * (10 * 1024 * 1024)}).encode()
    response = httpx.post(server.url + "/v1/completions", content=body, headers={"content-type": "application/json"},
                          timeout=120)
    assert response.status_code == 413
    assert response.json()["error"]["limit"] == "max_body_bytes"
    not_json = httpx.post(server.url + "/v1/completions", content=b"{not json", timeout=60)
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]["message"]


def test_unknown_paths_and_methods_are_json_errors(server):
    assert httpx.get(server.url + "/v1/nothing", timeout=30).json()["error"]["type"] == "not_found_error"
    assert httpx.get(server.url + "/v1/completions", timeout=30).status_code == 405


def _running(server) -> int:
    return server.get_json("/health")["generations"]


def _wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_concurrency_limit_disconnect_and_a_free_event_loop(server):
    long = {"model": SMALL, "prompt": "ROMEO:", "max_tokens": 100000, "stream": True}
    clients = [httpx.Client(timeout=120) for _ in range(2)]
    streams = [client.stream("POST", server.url + "/v1/completions", json=long) for client in clients]
    responses = [stream.__enter__() for stream in streams]
    try:
        lines = [response.iter_lines() for response in responses]  # kept: a dropped iterator closes its stream
        for response, stream_lines in zip(responses, lines):
            assert response.status_code == 200
            next(stream_lines)  # tokens are flowing
        assert _running(server) == 2
        # Two generations hold the two slots: a third is refused, naming the limit.
        refused = _post(server, {"model": SMALL, "prompt": "a", "max_tokens": 5})
        assert refused.status_code == 429
        assert refused.json()["error"]["limit"] == "max_concurrent_generations"
        # The event loop still answers while the workers sample.
        started = time.monotonic()
        assert server.get_json("/v1/models")["data"]
        assert time.monotonic() - started < 5
    finally:
        for stream, client in zip(streams, clients):
            stream.__exit__(None, None, None)  # the clients hang up mid-stream
            client.close()
    # 100,000 tokens would take minutes; hanging up stops them.
    assert _wait_until(lambda: _running(server) == 0, 20), "abandoned generations kept running"
    assert _post(server, {"model": SMALL, "prompt": "a", "max_tokens": 5}).status_code == 200


def test_binds_to_loopback_by_default():
    from zoo_core.cli import build_parser

    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"


def test_a_client_that_leaves_a_plain_request_stops_it(server):
    body = {"model": SMALL, "prompt": "ROMEO:", "max_tokens": 100000}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server.url + "/v1/completions", json=body, timeout=httpx.Timeout(60, read=3))
    assert _wait_until(lambda: _running(server) == 0, 20), "a departed client's generation kept running"
