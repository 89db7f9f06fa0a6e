"""Each extra covers the commands it names: in a venv holding the zoo with that
extra alone (tests/extra_venvs.py: links to this environment's packages, offline),
the extra's commands run on a shipped tiny variant, and a command of another
extra is refused in one line naming that extra (`pip install 'zoo-lm[X]'`),
never a traceback. One venv per extra, built once for the module.

`eval-harness` backs no zoo command (lm-eval reads `zoo serve`, which is the
web extra's: docs/serving.md), so it has no venv here; `interop` is hf and onnx."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest

from .extra_venvs import make_venv

for _module in ("gguf", "transformers", "onnxruntime", "onnxscript", "transformer_lens", "uvicorn", "matplotlib",
                "tensorboard", "mlflow"):
    pytest.importorskip(_module, reason=f"an extra's package ({_module}) is not installed")

pytestmark = pytest.mark.slow  # a venv per extra, and a torch import per command (about two minutes)

VARIANT = "llama-char-mini"  # shipped, tiny, and laid out as every format takes it
EXTRAS = ("gguf", "hf", "onnx", "lens", "web", "plots", "tensorboard", "mlflow")


def _environment(home) -> dict[str, str]:
    environment = {**os.environ, "ZOO_HOME": str(home / "zoo"), "ZOO_CACHE": str(home / "cache"), "OMP_NUM_THREADS": "1"}
    environment.pop("ZOO_REGISTRY", None)
    return environment


def _zoo(python, home, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), "-m", "zoo_core", *args], capture_output=True, text=True, env=_environment(home), cwd=home,
        timeout=600,
    )


def _succeeds(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, done.stderr
    return done


def _refused_naming(done: subprocess.CompletedProcess, extra: str) -> None:
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"pip install 'zoo-lm[{extra}]'" in line, line


def _importable(python, *modules: str) -> list[bool]:
    probe = subprocess.run(
        [str(python), "-c", f"import importlib.util as u; print([u.find_spec(m) is not None for m in {modules!r}])"],
        capture_output=True, text=True, timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    return json.loads(probe.stdout.replace("True", "true").replace("False", "false"))


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    return {extra: make_venv(tmp_path_factory.mktemp(f"venv-{extra}"), (extra,)) for extra in EXTRAS}


def test_the_gguf_extra_alone_exports_and_imports_gguf(venvs, tmp_path):
    python = venvs["gguf"]
    # the extra and nothing else
    assert _importable(python, "gguf", "tokenizers", "transformers", "accelerate") == [True, True, False, False]
    exported = _succeeds(_zoo(python, tmp_path, "export", VARIANT, "--format", "gguf", "--out", "out"))
    assert "checked: logits" in exported.stdout
    _succeeds(_zoo(python, tmp_path, "import", "gguf", f"out/{VARIANT}.gguf", "--name", "back"))
    sampled = _succeeds(_zoo(python, tmp_path, "sample", "back", "--prompt", "ROMEO:", "--max-new-tokens", "3", "--seed", "1"))
    assert sampled.stdout.startswith("ROMEO:")
    # what the other extras' refusal of --quantize int8 asks for is enough
    quantized = _succeeds(_zoo(python, tmp_path, "sample", VARIANT, "--quantize", "int8", "--prompt", "ROMEO:",
                               "--max-new-tokens", "2"))
    assert quantized.stdout.startswith("ROMEO:")
    _refused_naming(_zoo(python, tmp_path, "export", VARIANT, "--format", "hf", "--out", "hf"), "hf")


def test_the_hf_extra_alone_exports_and_imports_hf_folders(venvs, tmp_path):
    python = venvs["hf"]
    _succeeds(_zoo(python, tmp_path, "export", VARIANT, "--format", "hf", "--out", "folder"))
    _succeeds(_zoo(python, tmp_path, "import", "hf", "folder", "--name", "back"))
    _refused_naming(_zoo(python, tmp_path, "export", VARIANT, "--format", "gguf", "--out", "gguf"), "gguf")
    # --quantize int8 keeps llama.cpp's Q8_0 blocks: the gguf extra's, refused before anything loads
    _refused_naming(_zoo(python, tmp_path, "sample", VARIANT, "--quantize", "int8", "--prompt", "ROMEO:",
                             "--max-new-tokens", "2"), "gguf")


def test_the_onnx_extra_alone_exports_onnx(venvs, tmp_path):
    python = venvs["onnx"]
    assert _importable(python, "onnx", "onnxscript", "onnxruntime", "transformers") == [True, True, True, False]
    exported = _succeeds(_zoo(python, tmp_path, "export", VARIANT, "--format", "onnx", "--out", "out"))
    assert "checked: logits" in exported.stdout and (tmp_path / "out" / "model.onnx").stat().st_size > 0
    _refused_naming(_zoo(python, tmp_path, "export", VARIANT, "--format", "transformer-lens", "--out", "lens"), "lens")


def test_the_lens_extra_alone_exports_for_transformer_lens(venvs, tmp_path):
    python = venvs["lens"]  # TransformerLens builds on transformers: the extra includes hf
    assert _importable(python, "transformer_lens", "transformers", "onnxruntime") == [True, True, False]
    exported = _succeeds(_zoo(python, tmp_path, "export", VARIANT, "--format", "transformer-lens", "--out", "out"))
    assert "checked: logits" in exported.stdout
    _refused_naming(_zoo(python, tmp_path, "export", VARIANT, "--format", "onnx", "--out", "onnx"), "onnx")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _completion(port: int) -> dict:
    """The server's answer to a real completion request, once it listens (it is polled until then)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=json.dumps({"model": VARIANT, "prompt": "ROMEO:", "max_tokens": 3, "seed": 1}).encode(),
        headers={"Content-Type": "application/json"},
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


def test_the_web_extra_alone_writes_the_gallery_and_serves(venvs, tmp_path):
    python = venvs["web"]
    written = _succeeds(_zoo(python, tmp_path, "gallery", "--out", "site", "--variants", VARIANT, "--quiet"))
    assert "1 variants" in written.stdout and (tmp_path / "site" / "index.html").is_file()
    port = _free_port()
    server = subprocess.Popen(
        [str(python), "-m", "zoo_core", "serve", "--no-gallery", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_environment(tmp_path), cwd=tmp_path,
    )
    try:
        answer = _completion(port)
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=60)
    assert answer["model"] == VARIANT and answer["choices"][0]["text"], answer
    assert "Traceback" not in stderr, stderr
    _refused_naming(_zoo(python, tmp_path, "attention", VARIANT, "--prompt", "ROMEO:", "--out", "maps.png"), "plots")


def test_the_plots_extra_alone_draws(venvs, tmp_path):
    python = venvs["plots"]
    _succeeds(_zoo(python, tmp_path, "attention", VARIANT, "--prompt", "ROMEO:", "--out", "maps.png"))
    _succeeds(_zoo(python, tmp_path, "inspect", VARIANT, "--prompt", "ROMEO: come", "--logit-lens", "--out", "lens.png"))
    _succeeds(_zoo(python, tmp_path, "compare", "bigram", VARIANT, "--windows", "2", "--max-new-tokens", "8",
                   "--out", "samples.png"))
    study = ("experiment", "--arms", "bigram", "--steps", "2", "--seeds", "1", "--eval-every", "1",
             "--eval-targets", "32", "--quiet")
    _succeeds(_zoo(python, tmp_path, *study, "--out", "study"))
    for picture in ("maps.png", "lens.png", "samples.png", "study/loss.png", "study/samples.png"):
        assert (tmp_path / picture).read_bytes().startswith(b"\x89PNG"), picture
    # the other extras' venvs refuse a study before it trains, rather than after, at its plots
    _refused_naming(_zoo(venvs["web"], tmp_path, *study, "--out", "unplotted"), "plots")
    assert not (tmp_path / "unplotted").exists()
    _refused_naming(_zoo(python, tmp_path, "gallery", "--out", "site"), "web")


def _train(python, home, log_to: str) -> subprocess.CompletedProcess:
    return _zoo(python, home, "train", f"mini-{log_to}", "--from", VARIANT, "--steps", "2", "--out", log_to,
                "--log-to", log_to)


def test_the_tensorboard_extra_alone_logs_a_run(venvs, tmp_path):
    python = venvs["tensorboard"]
    _succeeds(_train(python, tmp_path, "tensorboard"))
    (events,) = (tmp_path / "tensorboard" / "tensorboard").glob("*/events.out.tfevents.*")
    read = subprocess.run(
        [str(python), "-c", "import sys; from tensorboard.backend.event_processing.event_accumulator import "
         "EventAccumulator as E; e = E(sys.argv[1]); e.Reload(); print(len(e.Scalars('train/loss')))", str(events.parent)],
        capture_output=True, text=True, timeout=120,
    )
    assert read.returncode == 0 and read.stdout.strip() == "2", read.stderr  # one loss per step
    _refused_naming(_train(python, tmp_path, "mlflow"), "mlflow")


def test_the_mlflow_extra_alone_logs_a_run(venvs, tmp_path):
    python = venvs["mlflow"]
    trained = _succeeds(_train(python, tmp_path, "mlflow"))
    assert "mlflow/mlflow.db (run " in trained.stdout
    assert (tmp_path / "mlflow" / "mlflow" / "mlflow.db").stat().st_size > 0
    _refused_naming(_train(python, tmp_path, "tensorboard"), "tensorboard")
