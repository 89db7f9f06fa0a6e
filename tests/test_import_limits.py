"""Imports are held to the loader's standard: the configuration is checked
against the tensors, sizes are bounded before anything is read or copied, only
regular files are read, every refusal is one line, and nothing is left behind."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from zoo_core.plugin_api.manager import get_plugins

from .test_crash_safety import _nanogpt_checkpoint

ZOO = Path(sys.executable).parent / "zoo"


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def _nothing_left(home: Path) -> None:
    assert not home.exists() or not any(home.rglob("*")), sorted(map(str, home.rglob("*")))


def _rewritten(path: Path, change) -> Path:
    """The nanoGPT checkpoint at ``path`` with ``change(checkpoint)`` applied."""
    checkpoint = torch.load(path, weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, path)
    return path


@pytest.mark.parametrize(
    "change, fragments",
    [
        (lambda c: c["model_args"].update(n_layer=10**9), ["the configuration says n_layer 1000000000", "hold 1"]),
        (lambda c: c["model_args"].update(n_layer=-1), ["field 'config.n_layer': must be at least 1, not -1"]),
        (lambda c: c["model_args"].update(n_head=0), ["field 'config.n_head': must be at least 1, not 0"]),
        (lambda c: c["model_args"].update(n_embd=32), ["the configuration says d_model 32, the tensors hold 16"]),
        (lambda c: c["model_args"].update(block_size=8), ["the configuration says context length 8, the tensors hold 16"]),
        (lambda c: c["model_args"].update(n_embd=float("nan")), ["model_args n_embd is nan, not a whole number"]),
        (lambda c: c["model"].update({"transformer.h.0.attn.c_proj.weight": torch.zeros(16, 8)}), ["wrong shape"]),
        (lambda c: c["model"].update({"transformer.wte.weight": torch.zeros(1).expand(10**9, 16)}),
         ["transformer.wte.weight", "an expanded tensor"]),
        (lambda c: c["model"].update({"transformer.wte.weight": torch.zeros(65, 16).to_sparse()}),
         ["transformer.wte.weight", "is sparse"]),
    ],
    ids=["billion-layers", "n_layer-1", "n_head0", "wrong-width", "wrong-window", "nan-width", "wrong-shape",
         "expanded", "sparse"],
)
def test_a_configuration_that_does_not_fit_the_tensors_is_refused(zoo, tmp_path, private_home, change, fragments):
    path = _rewritten(_nanogpt_checkpoint(tmp_path / "ckpt.pt", 1), change)
    started = time.perf_counter()
    _one_line_error(zoo("import", "nanogpt", str(path), "--name", "nano"), str(path), *fragments)
    assert time.perf_counter() - started < 30  # nothing huge was made
    _nothing_left(private_home)


def test_a_sparse_3_gib_file_is_not_read_whole(zoo, tmp_path, private_home):
    path = tmp_path / "sparse.pt"
    with open(path, "wb") as handle:
        handle.truncate(3 * 1024**3)  # a hole: no disk used, 3 GiB of zeros to whoever reads it
    started = time.perf_counter()
    _one_line_error(zoo("import", "nanogpt", str(path), "--name", "nano"), str(path), "not a torch checkpoint")
    assert time.perf_counter() - started < 10
    _nothing_left(private_home)


def test_a_fifo_is_refused_without_waiting(tmp_path, private_home):
    fifo = tmp_path / "ckpt.pt"
    os.mkfifo(fifo)
    result = subprocess.run([str(ZOO), "import", "nanogpt", str(fifo), "--name", "nano"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "is a FIFO, not a regular file" in result.stderr
    _nothing_left(private_home)


def test_a_file_name_that_is_not_utf8_imports(zoo, tmp_path, private_home):
    path = Path(os.fsdecode(bytes(tmp_path) + b"/ckpt-\xff.pt"))
    _nanogpt_checkpoint(path, 1)
    result = zoo("import", "nanogpt", str(path), "--name", "nano")
    assert result.code == 0, result.err
    assert "ckpt-\\\\xff.pt" in zoo("show", "nano").out  # escaped in the card, as TOML shows it


def test_the_imported_tokenizer_is_checked_by_its_sha256(zoo, tmp_path, private_home):
    """A same-size swap of two characters in the imported vocabulary changes every
    sample; the card records the file's sha256, so `zoo verify` fails."""
    assert zoo("import", "nanogpt", str(_nanogpt_checkpoint(tmp_path / "ckpt.pt", 1)), "--name", "nano").code == 0
    assert zoo("verify", "nano").code == 0
    vocabulary = private_home / "checkpoints" / "nano.tokenizer.json"
    text = vocabulary.read_text(encoding="utf-8")
    swapped = text.replace('"a"', '"\0"').replace('"b"', '"a"').replace('"\0"', '"b"')
    assert swapped != text and len(swapped) == len(text)
    vocabulary.write_text(swapped, encoding="utf-8")
    assert json.loads(swapped)["characters"] != json.loads(text)["characters"]
    get_plugins(reload=True)
    result = zoo("verify", "nano")
    assert result.code == 1 and "sha256" in result.out + result.err, result.out + result.err


def _gpt2_folder(folder: Path, **config) -> Path:
    """A tiny GPT-2-layout folder (random weights, 65 tokens) as transformers writes it."""
    folder.mkdir()
    generator = torch.Generator().manual_seed(0)
    C, V, T = 16, 65, 16

    def weights(*shape):
        return torch.randn(*shape, generator=generator) * 0.1

    tensors = {"wte.weight": weights(V, C), "wpe.weight": weights(T, C), "ln_f.weight": torch.ones(C),
               "ln_f.bias": torch.zeros(C)}
    for name, shape in [("ln_1", (C,)), ("ln_2", (C,)), ("attn.c_attn", (C, 3 * C)), ("attn.c_proj", (C, C)),
                        ("mlp.c_fc", (C, 4 * C)), ("mlp.c_proj", (4 * C, C))]:
        tensors[f"h.0.{name}.weight"] = torch.ones(shape) if len(shape) == 1 else weights(*shape)
        tensors[f"h.0.{name}.bias"] = torch.zeros(shape[-1])
    save_file(tensors, str(folder / "model.safetensors"))
    settings = {"model_type": "gpt2", "n_embd": C, "n_layer": 1, "n_head": 2, "n_positions": T, "vocab_size": V,
                **config}
    (folder / "config.json").write_text(json.dumps(settings))
    return folder


def test_a_gpt2_folder_imports(zoo, tmp_path):
    assert zoo("import", "hf", str(_gpt2_folder(tmp_path / "model")), "--name", "hf-tiny").code == 0
    assert zoo("verify", "hf-tiny").code == 0


@pytest.mark.parametrize(
    "config, fragments",
    [
        ({"layer_norm_epsilon": math.nan}, ["layer_norm_epsilon is nan, not a finite number above 0"]),
        ({"layer_norm_epsilon": math.inf}, ["layer_norm_epsilon is inf"]),
        ({"n_layer": 10**9}, ["config.json says n_layer 1000000000, the file holds 1 layers"]),
        ({"n_head": 0}, ["field 'config.n_head': must be at least 1, not 0"]),
        ({"n_layer": "2"}, ["n_layer is '2', not a whole number"]),
    ],
    ids=["nan-epsilon", "infinite-epsilon", "billion-layers", "n_head0", "text"],
)
def test_a_gpt2_configuration_that_cannot_be_is_refused(zoo, tmp_path, private_home, config, fragments):
    folder = _gpt2_folder(tmp_path / "model", **config)
    _one_line_error(zoo("import", "hf", str(folder), "--name", "hf-tiny"), *fragments)
    _nothing_left(private_home)
