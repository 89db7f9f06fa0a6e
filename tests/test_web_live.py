"""A running `zoo serve` as a user meets it day to day: variants trained and removed
while it runs, models retrieved by id, a request log, a busy port, and a first start
that answers while its gallery is still being built."""

from __future__ import annotations

import re
import shutil
import socket
import time
import tomllib

import pytest

httpx = pytest.importorskip("httpx", reason="the web tests need the web extra: pip install 'zoo-lm[web]' httpx")
pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
openai = pytest.importorskip("openai", reason="these tests need the web-test extra: pip install 'zoo-lm[web-test]'")

import zoo_core  # noqa: E402
from zoo_core.plugin_api.manager import get_plugins  # noqa: E402
from zoo_core.storage.toml_text import render_toml  # noqa: E402

from .conftest import ROOT  # noqa: E402
from .web_support import Server  # noqa: E402

NEW = "my-bigram"


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    """A catalogue of the bigram alone (its gallery builds in seconds), and a home and cache of its own."""
    base = tmp_path_factory.mktemp("live")
    (base / "checkpoints").mkdir()
    for name in ("bigram.safetensors", "bpe-1024.tiktoken"):
        shutil.copyfile(ROOT / "checkpoints" / name, base / "checkpoints" / name)
    (base / "data").symlink_to(ROOT / "data")
    bigram = tomllib.loads((ROOT / "registry.toml").read_text(encoding="utf-8"))["bigram"]
    (base / "registry.toml").write_text(render_toml({"bigram": bigram}), encoding="utf-8")
    return {
        "ZOO_BUILTIN_REGISTRY": str(base / "registry.toml"),
        "ZOO_HOME": str(base / "home"),
        "ZOO_CACHE": str(base / "cache"),
    }


@pytest.fixture(scope="module")
def server(places):
    server = Server(environment=places, gallery=True)
    yield server
    server.stop()


@pytest.fixture
def same_catalogue(places, monkeypatch):
    """This process sees the server's catalogue: what `zoo` does here, the server sees."""
    for key, value in places.items():
        monkeypatch.setenv(key, value)
    get_plugins(reload=True)
    yield
    monkeypatch.delenv("ZOO_BUILTIN_REGISTRY")
    get_plugins(reload=True)


@pytest.fixture
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120) as client:
        yield client


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _ids(client) -> set[str]:
    return {model.id for model in client.models.list()}


def test_a_variant_trained_while_serving_is_listed_sampled_and_removed(server, client, zoo, same_catalogue):
    assert _ids(client) == {"bigram"}
    trained = zoo("train", NEW, "--from", "bigram", "--steps", "2", "--set", "eval_windows=16", "--quiet")
    assert trained.code == 0, trained.err

    # No restart: the next listing has it, and it samples what the Python API draws.
    assert _ids(client) == {"bigram", NEW}
    assert client.models.retrieve(NEW).id == NEW
    answer = client.completions.create(model=NEW, prompt="ROMEO:", max_tokens=12, seed=3)
    assert answer.choices[0].text == zoo_core.load(NEW).sample("ROMEO:", max_new_tokens=12, seed=3)[0].text
    offered = {entry["name"] for entry in server.get_json("/catalogue/index.json")["variants"]}
    assert NEW in offered  # what `zoo pull` sees
    # The gallery is built again behind the scenes, its new page served once written.
    _wait_for(lambda: httpx.get(f"{server.url}/variants/{NEW}.html", timeout=30).status_code == 200, 300,
              f"the gallery never showed {NEW}: {server.output()}")

    assert NEW in server.get_json("/health")["loaded"]
    assert zoo("remove", NEW).code == 0
    assert _ids(client) == {"bigram"}
    assert NEW not in server.get_json("/health")["loaded"]  # its model (and its batch) let go
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve(NEW)
    with pytest.raises(openai.NotFoundError, match="unknown model"):
        client.completions.create(model=NEW, prompt="ROMEO:", max_tokens=5)
    assert NEW not in {entry["name"] for entry in server.get_json("/catalogue/index.json")["variants"]}


def test_a_model_is_retrieved_by_id_and_an_unknown_one_is_openais_404(server, client):
    model = client.models.retrieve("bigram")
    assert (model.id, model.object, model.owned_by) == ("bigram", "model", "catalogue")
    with pytest.raises(openai.NotFoundError) as refused:
        client.models.retrieve("no-such-model")
    error = refused.value.body  # the client reads OpenAI's shape: {"error": {"message", "type"}}
    assert error["type"] == "not_found_error" and "no-such-model" in error["message"]


def test_each_request_is_logged_with_its_status_and_duration(server):
    httpx.get(server.url + "/v1/models/no-such-model", timeout=30)
    _wait_for(lambda: re.search(r"GET /v1/models/no-such-model 404 \d+\.\d ms\n", server.output()), 10,
              f"no access log line: {server.output()}")


def test_a_busy_port_is_one_line_before_any_banner(zoo):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = zoo("serve", "--no-gallery", "--port", str(port))
    assert result.code == 1 and result.out == ""  # no banner
    assert result.err == f"zoo: error: port {port} on 127.0.0.1 is in use (another server?); choose another with --port\n"


def test_a_first_start_answers_while_its_gallery_builds(tmp_path):
    """Every variant's gallery page is measured on a first start (15 s and more):
    the API, /health and completions answer meanwhile, the gallery says it is being
    built; --log-level warning leaves the requests out of the log."""
    server = Server("--log-level", "warning", environment={"ZOO_CACHE": str(tmp_path / "cache")}, gallery=True)
    try:
        assert server.get_json("/health")["gallery"] == "building"
        assert "bigram" in {model["id"] for model in server.get_json("/v1/models")["data"]}
        body = {"model": "bigram", "prompt": "ROMEO:", "max_tokens": 5}
        assert httpx.post(server.url + "/v1/completions", json=body, timeout=60).status_code == 200
        page = httpx.get(server.url + "/", timeout=30)
        assert page.status_code == 503 and "being built" in page.text and page.headers["retry-after"]
        assert server.get_json("/health")["gallery"] == "building"  # all of the above came first
        log = server.output()
    finally:
        server.stop()
    assert "zoo serve: building the gallery" in log and "GET /health" not in log



def test_a_gallery_that_cannot_be_built_says_why_and_the_server_goes_on(tmp_path):
    from zoo_core.web.site_builder import SiteBuilder

    in_the_way = tmp_path / "site"
    in_the_way.write_text("a file where the gallery's folder should be")
    builder = SiteBuilder(in_the_way)
    builder.start()
    _wait_for(lambda: builder.state != "building", 60, "the build never ended")
    assert builder.state == f"failed: {in_the_way} exists and is not a folder" and not builder.ready
    page = builder.building_page()
    assert page.status_code == 503 and "could not be built" in page.body.decode()
