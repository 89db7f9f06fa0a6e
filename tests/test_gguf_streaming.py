"""`zoo import gguf` streams (issue 54): the network's tensors are made and written one
at a time (zoo_core.interop.deferred_tensors), so a fresh process's memory grows by
about the model once (the reference paragraph's forward pass maps every weight), never
by the several copies an import that holds the model whole makes; and a head tied to
the embedding is stored once in a float32 import too, and tied again at load."""

from __future__ import annotations

import pytest
import torch

from zoo_core.loading.api import load
from zoo_core.storage.checkpoints import read_header

from .gguf_support import Q
from .test_gguf_bounds import byte_level, measured_import, tiny_llama  # noqa: F401  (byte_level: a fixture)

LAYERS, WIDTH = 12, 256  # 25 MB of float32 layers: large beside the rest of what an import holds


def _tied_llama(folder, vocabulary, layers: int):
    path = folder / f"tied-{layers}.gguf"
    held = tiny_llama(path, vocabulary, layers=layers, width=WIDTH, kinds=(Q.Q8_0,), tied=True)
    return path, sum(values.size for values in held.values()) * 4 / 2**20, held


@pytest.fixture(scope="module")
def tied_file(byte_level, tmp_path_factory):  # noqa: F811
    return _tied_llama(tmp_path_factory.mktemp("streaming"), byte_level, LAYERS)


def test_a_float32_import_grows_by_the_model_once_not_by_its_copies(tied_file, byte_level, tmp_path):  # noqa: F811
    """What the layers add to the peak, against a one-layer file of the same vocabulary
    (the tokenizer, the interpreter's own growth): about the float32 layers once, which
    the reference paragraph's forward pass maps. Holding the dequantised tensors, a
    built network and a copy to write, as the import did before it streamed, took
    3.4 times as much."""
    path, model_mib, _ = tied_file
    small, small_mib, _ = _tied_llama(tmp_path, byte_level, 1)
    report = measured_import(path, tmp_path / "home", "--dequantize")
    baseline = measured_import(small, tmp_path / "small-home", "--dequantize")
    assert report["code"] == 0 and baseline["code"] == 0, (report["err"], baseline["err"])
    layers_mib = model_mib - small_mib
    assert report["growth_mib"] - baseline["growth_mib"] < 2 * layers_mib, (report, baseline, layers_mib)


def test_a_tied_head_is_stored_once_and_tied_again_at_load(tied_file, private_home, zoo):
    path, _, held = tied_file
    done = zoo("import", "gguf", str(path), "--name", "tied-float", "--dequantize")
    assert done.code == 0, done.err
    header = read_header(private_home / "checkpoints" / "tied-float.safetensors")
    assert "token_embedding.weight" in header and "lm_head.weight" not in header
    model = load("tied-float")
    network = model.network
    assert network.lm_head.weight is network.token_embedding.weight
    assert torch.equal(network.token_embedding.weight, torch.from_numpy(held["token_embd.weight"]))
    # a second load maps the verified file; the head is the embedding there too
    again = load("tied-float").network
    assert again.lm_head.weight is again.token_embedding.weight


def test_the_scratch_file_lives_in_the_catalogue_not_in_tmp(tied_file, private_home, zoo, monkeypatch, tmp_path):
    """Where /tmp is memory (tmpfs), a scratch file there would hold the streamed model
    in RAM: the import writes it beside the catalogue, and leaves nothing behind."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))  # a /tmp the import cannot use
    done = zoo("import", "gguf", str(tied_file[0]), "--name", "beside", "--dequantize")
    assert done.code == 0, done.err
    assert not [p for p in private_home.iterdir() if p.name.startswith(".import-")]
