"""`zoo serve` under attack, on loopback only: forged Host names, cross-origin posts,
a bind beyond loopback without a key, slow-header clients, running out of
descriptors, wrong types; and the API key, CORS and /metrics working for those
they are meant for. Every server is a real `zoo serve` subprocess on 127.0.0.1;
0.0.0.0 appears only where the server must refuse before binding it."""

from __future__ import annotations

import os
import re
import resource
import selectors
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="the web tests need the web extra: pip install 'zoo-lm[web]' httpx")
pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
pytest.importorskip("prometheus_client", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tests.web_support import SMALL, ZOO, Server, free_port  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "serving.md"
HEADER_TIMEOUT = 3  # seconds: short, so the slow clients are cut off within the test
BODY_TIMEOUT = 2
SLOW_CLIENTS = 1000
MAX_CONNECTIONS = SLOW_CLIENTS + 50


@pytest.fixture(scope="module")
def server():
    server = Server("--header-timeout", str(HEADER_TIMEOUT), "--body-timeout", str(BODY_TIMEOUT),
                    "--max-connections", str(MAX_CONNECTIONS))
    yield server
    output = server.output()
    server.stop()
    assert "Traceback" not in output, output[-3000:]  # every attack above is answered without one


def _completion(**extra) -> dict:
    return {"model": SMALL, "prompt": "ROMEO:", "max_tokens": 5, **extra}


def _metrics(url: str, **kwargs) -> dict[str, float]:
    """Every sample of /metrics as 'name{label=value,...}' -> value."""
    response = httpx.get(url + "/metrics", timeout=30, **kwargs)
    assert response.status_code == 200, response.text
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def _tokens(samples: dict[str, float]) -> float:
    return sum(value for name, value in samples.items() if name.startswith("zoo_generated_tokens_total{"))


def test_a_forged_host_is_refused(server):
    for forged in ("evil.example", f"evil.example:{server.port}", "127.0.0.1.evil.example"):
        response = httpx.get(server.url + "/v1/models", headers={"Host": forged}, timeout=30)
        assert response.status_code == 400, forged
        assert "not a name this server answers" in response.json()["error"]["message"]
    for fine in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", "[::1]", "LOCALHOST"):
        assert httpx.get(server.url + "/health", headers={"Host": fine}, timeout=30).status_code == 200, fine


def test_a_cross_origin_text_plain_post_never_reaches_a_model(server):
    before = _tokens(_metrics(server.url))
    body = '{"model": "%s", "prompt": "ROMEO:", "max_tokens": 5}' % SMALL
    # What any web page can send without a CORS preflight ("simple request").
    simple = httpx.post(server.url + "/v1/completions", content=body, timeout=30,
                        headers={"Origin": "http://evil.example", "Content-Type": "text/plain"})
    assert simple.status_code == 403 and "cross-origin" in simple.json()["error"]["message"]
    as_json = httpx.post(server.url + "/v1/completions", content=body, timeout=30,
                         headers={"Origin": "http://evil.example", "Content-Type": "application/json"})
    assert as_json.status_code == 403
    preflight = httpx.options(server.url + "/v1/completions", timeout=30, headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers
    # The same-origin sandbox page (file://, sandboxed iframes) sends "null".
    assert httpx.post(server.url + "/v1/completions", content=body, timeout=30,
                      headers={"Origin": "null", "Content-Type": "application/json"}).status_code == 403
    # Without an Origin, a text/plain body is still no JSON request.
    plain = httpx.post(server.url + "/v1/completions", content=body, headers={"Content-Type": "text/plain"},
                       timeout=30)
    assert plain.status_code == 415 and "application/json" in plain.json()["error"]["message"]
    form = httpx.post(server.url + "/v1/completions", data={"model": SMALL}, timeout=30)
    assert form.status_code == 415
    assert _tokens(_metrics(server.url)) == before, "a refused request generated tokens"
    # The server's own pages (Origin = its own address) are answered.
    own = httpx.post(server.url + "/v1/completions", json=_completion(), headers={"Origin": server.url}, timeout=60)
    assert own.status_code == 200, own.text
    assert _tokens(_metrics(server.url)) == before + 5


def test_max_tokens_true_is_refused(server):
    for wrong in (True, "5"):
        response = httpx.post(server.url + "/v1/completions", json=_completion(max_tokens=wrong), timeout=30)
        assert response.status_code == 400, (wrong, response.text)
        assert "max_tokens" in response.json()["error"]["message"]


def test_a_bind_beyond_loopback_without_a_key_refuses_to_start():
    environment = {key: value for key, value in os.environ.items() if key != "ZOO_API_KEY"}
    started = time.monotonic()
    # The gallery is not skipped: the refusal must come before it is built.
    done = subprocess.run([*ZOO, "serve", "--host", "0.0.0.0", "--port", "1"], capture_output=True, text=True,
                          env=environment, timeout=120)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "API key" in done.stderr and "ZOO_API_KEY" in done.stderr, done.stderr
    assert done.stdout == ""
    assert time.monotonic() - started < 30
    # An empty key is no key.
    done = subprocess.run([*ZOO, "serve", "--host", "0.0.0.0", "--port", "1", "--api-key", ""],
                          capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode != 0 and "API key" in done.stderr


def test_a_bind_beyond_loopback_with_a_key_says_so_in_one_line():
    from zoo_core.web.security import Security, bind_notice, check_bind

    check_bind("0.0.0.0", "key")  # accepted: it has a key
    notice = bind_notice("0.0.0.0", Security(allowed_hosts=("zoo.lan",), api_key="key"))
    assert notice is not None and "\n" not in notice
    assert "beyond this machine" in notice and "API key" in notice and "zoo.lan" in notice
    assert bind_notice("127.0.0.1", Security()) is None and bind_notice("::1", Security()) is None


def test_which_host_names_are_answered():
    from zoo_core.web.security import Security, host_name

    default, listed, anything = Security(), Security(allowed_hosts=("Zoo.LAN:8000",)), Security(allowed_hosts=("*",))
    for header in ("localhost:8000", "127.0.0.1", "[::1]:8000", "192.168.1.5:8000", "[fe80::1]"):
        assert default.answers_host(host_name(header)), header
    for header in ("evil.example", "zoo.lan", "localhost.evil.example", ""):
        assert not default.answers_host(host_name(header)), header
    assert listed.answers_host(host_name("zoo.lan:8000")) and listed.answers_host(host_name("ZOO.lan"))
    assert anything.answers_host(host_name("evil.example"))


def _raise_descriptor_limit(wanted: int) -> int:
    """Raise this process's soft descriptor limit toward ``wanted`` (up to the hard limit); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def _connect(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setblocking(False)
        sockets.append(s)
    return sockets


def _closed_by_server(sockets: list[socket.socket], seconds: float) -> int:
    """How many of ``sockets`` the other side closes within ``seconds``."""
    selector = selectors.DefaultSelector()
    for s in sockets:
        selector.register(s, selectors.EVENT_READ)
    closed, deadline = 0, time.monotonic() + seconds
    while closed < len(sockets) and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            try:
                data = key.fileobj.recv(4096)  # type: ignore[union-attr]
            except ConnectionError:
                data = b""
            if not data:
                selector.unregister(key.fileobj)
                closed += 1
    selector.close()
    return closed


def test_slow_header_clients_are_cut_off_and_health_stays_answered(server):
    clients = min(SLOW_CLIENTS, _raise_descriptor_limit(SLOW_CLIENTS + 200) - 200)
    if clients < SLOW_CLIENTS:
        print(f"the hard descriptor limit allows only {clients} slow clients, not {SLOW_CLIENTS}")
    slow = _connect(server.port, clients)
    try:
        opened = time.monotonic()
        for s in slow:
            s.send(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        # One more header line each, now and then, never the blank line that ends them.
        while time.monotonic() - opened < HEADER_TIMEOUT - 1:
            started = time.monotonic()
            assert httpx.get(server.url + "/health", timeout=5).status_code == 200
            assert time.monotonic() - started < 1, "/health slowed down under the slow clients"
            for s in slow:
                try:
                    s.send(b"X-Slow: 1\r\n")
                except OSError:
                    pass
            time.sleep(0.5)
        still_open = len(slow) - _closed_by_server(slow, 0.01)
        assert still_open > clients * 0.9, "the slow clients were cut off before the header timeout"
        assert _closed_by_server(slow, HEADER_TIMEOUT + 5) == len(slow), "slow clients were left connected"
        assert time.monotonic() - opened < HEADER_TIMEOUT + 5
        assert httpx.get(server.url + "/health", timeout=5).status_code == 200
    finally:
        for s in slow:
            s.close()


def test_a_trickling_body_and_a_silent_client_are_cut_off(server):
    [trickling, silent] = _connect(server.port, 2)
    try:
        opened = time.monotonic()
        trickling.send(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 100\r\n\r\n{")
        time.sleep(1)
        trickling.send(b" ")
        assert _closed_by_server([trickling, silent], 0.01) == 0
        assert _closed_by_server([trickling], BODY_TIMEOUT + 3) == 1
        assert time.monotonic() - opened < BODY_TIMEOUT + 3
        assert _closed_by_server([silent], HEADER_TIMEOUT + 3) == 1
    finally:
        trickling.close()
        silent.close()


def test_connections_beyond_the_cap_are_closed_on_arrival(server):
    count = min(MAX_CONNECTIONS + 100, _raise_descriptor_limit(MAX_CONNECTIONS + 300) - 200)
    if count <= MAX_CONNECTIONS:
        pytest.skip(f"the hard descriptor limit allows {count} sockets, not more than the cap {MAX_CONNECTIONS}")
    idle = _connect(server.port, count)
    try:
        # Long before the header timeout, only those beyond the cap are gone.
        closed = _closed_by_server(idle, 1.5)
        assert count - MAX_CONNECTIONS <= closed < count - MAX_CONNECTIONS + 10
    finally:
        for s in idle:
            s.close()
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def test_running_out_of_descriptors_is_logged_once_per_interval(tmp_path):
    limit = 64

    def low_descriptor_limit():  # in the child, before it runs Python
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    log_path = tmp_path / "serve.log"
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen([*ZOO, "serve", "--no-gallery", "--port", str(port), "--header-timeout", "60"],
                                   stdout=log, stderr=subprocess.STDOUT, preexec_fn=low_descriptor_limit,
                                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.3)
        # Four times what the server may hold, all kept open: it runs out and goes
        # on trying to accept the rest for three seconds.
        held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(4 * limit)]
        time.sleep(3)
        for s in held:
            s.close()
        # The server recovers once the descriptors are free again.
        recovered = time.monotonic() + 15
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < recovered, "the server did not recover"
                time.sleep(0.3)
    finally:
        process.terminate()
        process.wait(timeout=15)
    text = log_path.read_text(errors="replace")
    assert "descriptor limit" in text  # the start-up warning: the cap needs more than the limit
    assert "Too many open files" in text  # it did run out
    assert log_path.stat().st_size < 32 * 1024, f"{log_path.stat().st_size} bytes of log"


def test_the_exhaustion_filter_passes_one_record_per_interval_and_counts_the_rest():
    import errno
    import logging

    from zoo_core.web.exhaustion_log import ExhaustionFilter

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("zoo-test-exhaustion")
    logger.addHandler(handler)
    logger.propagate = False
    logger.addFilter(ExhaustionFilter(interval=0.5))
    try:
        def fail(number: int) -> None:
            try:
                raise OSError(number, os.strerror(number))
            except OSError:
                logger.exception("socket.accept() out of system resource")

        for _ in range(1000):
            fail(errno.EMFILE)
        fail(errno.ENFILE)  # another kind passes on its own
        logger.error("something else")  # and other records pass untouched
        assert [record.getMessage() for record in records] == [
            "socket.accept() out of system resource", "socket.accept() out of system resource", "something else"]
        time.sleep(0.6)
        fail(errno.EMFILE)
        assert records[-1].getMessage().endswith("(999 more like it in the last 0.5 s not logged)")
    finally:
        logger.removeHandler(handler)


@pytest.fixture(scope="module")
def keyed():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_API_KEY", "s3cret-key")
        server = Server("--cors-origin", "https://app.example")
    yield server
    server.stop()


def test_the_api_key_guards_the_api_and_metrics_only(keyed):
    good = {"Authorization": "Bearer s3cret-key"}
    for path in ("/v1/models", "/metrics"):
        assert httpx.get(keyed.url + path, timeout=30).status_code == 401
        assert httpx.get(keyed.url + path, headers={"Authorization": "Bearer s3cret-kez"}, timeout=30).status_code == 401
        assert httpx.get(keyed.url + path, headers={"Authorization": "s3cret-key"}, timeout=30).status_code == 401
        assert httpx.get(keyed.url + path, headers=good, timeout=30).status_code == 200
    refused = httpx.post(keyed.url + "/v1/completions", json=_completion(), timeout=30)
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert httpx.post(keyed.url + "/v1/completions", json=_completion(), headers=good, timeout=60).status_code == 200
    # The catalogue stays open too (test_the_api_key_guard_passes_the_catalogue: building
    # its index here would double this test's time).
    for path in ("/health", "/sample", "/static/sample.js"):
        assert httpx.get(keyed.url + path, timeout=120).status_code == 200, path
    assert 'id="api_key"' in httpx.get(keyed.url + "/sample", timeout=30).text  # the page asks for the key
    assert 'id="api_key"' not in httpx.get(keyed.url + "/health", timeout=30).text


def test_the_api_key_guard_passes_the_catalogue():
    import asyncio

    from zoo_core.web.security import ApiKeyGuard

    async def answered(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def status(path: str) -> int:
        sent: list[dict] = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path, "headers": []}
        asyncio.run(ApiKeyGuard(answered, api_key="k")(scope, None, send))
        return sent[0]["status"]

    assert status("/catalogue/index.json") == 200 and status("/catalogue/archives/x.zoo") == 200
    assert status("/v1/models") == 401 and status("/metrics") == 401


def test_an_allowed_origin_gets_cors_and_others_do_not(keyed):
    origin = "https://app.example"
    preflight = httpx.options(keyed.url + "/v1/completions", timeout=30, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == origin
    answer = httpx.post(keyed.url + "/v1/completions", json=_completion(), timeout=60,
                        headers={"Origin": origin, "Authorization": "Bearer s3cret-key"})
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == origin
    other = httpx.post(keyed.url + "/v1/completions", json=_completion(), timeout=60,
                       headers={"Origin": "https://app.example.evil", "Authorization": "Bearer s3cret-key"})
    assert other.status_code == 403


def test_metrics_count_requests_tokens_and_latencies(keyed):
    good = {"Authorization": "Bearer s3cret-key"}
    before = _metrics(keyed.url, headers=good)
    assert httpx.post(keyed.url + "/v1/completions", json=_completion(max_tokens=7), headers=good,
                      timeout=60).status_code == 200
    with httpx.stream("POST", keyed.url + "/v1/completions", json=_completion(max_tokens=4, stream=True),
                      headers=good, timeout=60) as streamed:
        assert streamed.status_code == 200
        streamed.read()
    after = _metrics(keyed.url, headers=good)

    def grew(name: str) -> float:
        return after.get(name, 0) - before.get(name, 0)

    assert grew(f"zoo_generated_tokens_total{{model={SMALL}}}") == 11
    assert grew("zoo_http_requests_total{method=POST,route=/v1/completions,status=200}") == 2
    assert grew(f"zoo_time_to_first_token_seconds_count{{model={SMALL}}}") == 2
    assert grew("zoo_http_request_seconds_count{route=/v1/completions}") == 2
    assert after["zoo_generations_in_flight{}"] == 0
    assert "zoo_batch_size{}" in after and "zoo_generation_queue_depth{}" in after


def test_each_app_counts_in_its_own_registry():
    from zoo_core.web.metrics import ServerMetrics

    first, second = ServerMetrics(), ServerMetrics()
    first.observe_batch(3)
    second.observe_batch(5)
    first.generation_started()
    first.generation_finished("m", 4)
    assert b"zoo_batch_size 3.0" in first.exposition()[0] and b"zoo_batch_size 5.0" in second.exposition()[0]
    assert b'zoo_generated_tokens_total{model="m"} 4.0' in first.exposition()[0]
    assert b"zoo_generated_tokens_total{" not in second.exposition()[0]


# --- the commands of docs/serving.md, as written ---------------------------------


def _doc_commands() -> list[str]:
    # The sections from "Running on a network" on (the ones before have tests of their own).
    text = DOC.read_text(encoding="utf-8").split("\n## Running on a network", 1)[1]
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def _shell(line: str, environment: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=environment, timeout=120)


def _serve_from_doc(line: str, environment: dict, patch: pytest.MonkeyPatch) -> Server:
    """`zoo serve` as the line says, on 127.0.0.1 and a free port (never 0.0.0.0 with a key)."""
    assignment, _, command = line.rpartition("zoo serve ")
    arguments = shlex.split(command)
    if "--host" in arguments:
        arguments[arguments.index("--host") + 1] = "127.0.0.1"
    if "--port" in arguments:
        del arguments[arguments.index("--port"):arguments.index("--port") + 2]
    with patch.context() as scoped:
        for name, value in environment.items():
            scoped.setenv(name, value)
        if assignment:  # VAR=$(...) zoo serve ...: the variable's value as bash gives it
            name, _, value = assignment.strip().partition("=")
            scoped.setenv(name, _shell(f"echo {value}", environment).stdout.strip())
        return Server(*arguments)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the doc's commands use curl")
def test_the_commands_of_docs_serving_md(monkeypatch):
    commands = _doc_commands()
    environment = {key: value for key, value in os.environ.items() if key != "ZOO_API_KEY"}
    # `zoo` and `python` as the user's shell finds them: this environment's.
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    environment["OMP_NUM_THREADS"] = "1"
    servers: list[Server] = []
    try:
        refusal = _shell(commands[0], environment)
        assert commands[0].startswith("zoo serve --host 0.0.0.0") and refusal.returncode == 1
        assert refusal.stderr.count("\n") == 1 and "API key" in refusal.stderr
        assert commands[1].startswith("export ZOO_API_KEY=")
        environment["ZOO_API_KEY"] = _shell(commands[1] + ' && echo "$ZOO_API_KEY"', environment).stdout.strip()
        assert len(environment["ZOO_API_KEY"]) >= 32
        servers.append(_serve_from_doc(commands[2], environment, monkeypatch))
        ran = 0
        for line in commands[3:]:
            if "zoo serve" in line:  # behind a proxy: loopback, the proxy's Host, a key of its own
                proxied = _serve_from_doc(line, environment, monkeypatch)
                servers.append(proxied)
                same_origin = httpx.post(proxied.url + "/v1/completions", json=_completion(), timeout=60, headers={
                    "Host": "zoo.example.org", "Origin": "https://zoo.example.org"})
                assert same_origin.status_code == 401  # its key is not the shell's
                assert httpx.get(proxied.url + "/sample", headers={"Host": "zoo.example.org"},
                                 timeout=30).status_code == 200
                assert httpx.get(proxied.url + "/sample", headers={"Host": "zoo.lan"}, timeout=30).status_code == 400
                continue
            assert line.startswith("curl -s http://zoo.lan:8000/"), line
            # The name zoo.lan, reached on the test's server: the Host header stays zoo.lan:8000.
            port = servers[0].port
            done = _shell(line.replace("curl ", f"curl -f --connect-to zoo.lan:8000:127.0.0.1:{port} ", 1),
                          environment)
            assert done.returncode == 0, (line, done.stderr)
            assert done.stdout.strip(), line
            ran += 1
        assert ran == 3
    finally:
        for server in servers:
            server.stop()
