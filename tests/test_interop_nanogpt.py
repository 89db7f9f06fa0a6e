"""`zoo import nanogpt`: a model trained with nanoGPT's own code enters the zoo
with the same logits, and a checkpoint that would run code is refused."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
import torch

import zoo_core
from zoo_core.errors import ZooError
from zoo_core.plugin_api.manager import get_plugins

from .conftest import ROOT

# The reference copy of nanoGPT (MIT) beside the project; never copied into it.
NANOGPT_MODEL = ROOT.parent / "shared" / "reference" / "nanogpt" / "model.py"


def nanogpt_module():
    """nanoGPT's model.py, imported from where the reference copy lies (never copied here)."""
    path = NANOGPT_MODEL.resolve()
    if not path.exists():
        pytest.skip(f"nanoGPT's model.py is not at {path}; these tests compare against nanoGPT's own model")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["nanogpt_model"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def zoo_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "zoo-home"))
    get_plugins(reload=True)
    yield tmp_path / "zoo-home"
    get_plugins(reload=True)


def train_nanogpt(tmp_path, bias: bool, steps: int = 20):
    """A tiny GPT trained by nanoGPT's model on the character corpus and saved
    with the keys nanoGPT's train.py writes."""
    nanogpt = nanogpt_module()
    torch.manual_seed(0)
    model_args = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, bias=bias, vocab_size=65, dropout=0.0)
    model = nanogpt.GPT(nanogpt.GPTConfig(**model_args))
    text = (ROOT / "data" / "tinyshakespeare.txt").read_text()[:20000]
    vocabulary = sorted(set((ROOT / "data" / "tinyshakespeare.txt").read_text()))
    data = torch.tensor([vocabulary.index(c) for c in text])
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        starts = torch.randint(len(data) - 33, (8,), generator=generator)
        x = torch.stack([data[s : s + 32] for s in starts])
        y = torch.stack([data[s + 1 : s + 33] for s in starts])
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    config = {"learning_rate": 1e-3, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.99, "batch_size": 8,
              "grad_clip": 1.0, "decay_lr": False, "dataset": "shakespeare_char", "compile": False}
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "model_args": model_args,
                  "iter_num": steps, "best_val_loss": torch.tensor(2.5), "config": config}
    path = tmp_path / f"ckpt-bias-{bias}.pt"
    torch.save(checkpoint, path)
    return model.eval(), path, data[:64]


@pytest.mark.parametrize("bias", [True, False])
def test_imported_nanogpt_gives_nanogpts_logits(tmp_path, zoo_home, zoo, bias):
    reference, checkpoint, ids = train_nanogpt(tmp_path, bias)
    result = zoo("import", "nanogpt", str(checkpoint), "--name", "nano-test")
    assert result.code == 0, result.err
    assert (zoo_home / "registry.toml").exists() and (zoo_home / "checkpoints" / "nano-test.safetensors").exists()

    model = zoo_core.load("nano-test")  # verified like any variant: sha256, names, shapes, card
    window = ids[:32][None]
    with torch.no_grad():
        theirs, _ = reference(window, window)  # with targets nanoGPT returns every position's logits
        ours, _ = model.network(window)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0), (ours - theirs).abs().max()
    card = model.card
    assert card.config["mlp"] == "gelu" and card.config["tie_embeddings"] and card.config["layer_bias"] is bias
    assert card.lineage.startswith("imported: nanoGPT checkpoint") and len(card.lineage.rsplit(" ", 1)[1]) == 64
    assert card.parameters == sum(p.numel() for p in reference.parameters())
    assert "nano-test" in zoo("list").out
    verified = zoo("verify", "nano-test")
    assert verified.code == 0 and "user" in verified.out


def test_import_refuses_names_that_exist(tmp_path, zoo_home, zoo):
    _, checkpoint, _ = train_nanogpt(tmp_path, True, steps=1)
    result = zoo("import", "nanogpt", str(checkpoint), "--name", "gpt-char-mini")
    assert result.code == 1 and "already exists" in result.err and len(result.err.strip().splitlines()) == 1
    result = zoo("import", "nanogpt", str(checkpoint), "--name", "Not_A_Name")
    assert result.code == 1 and "a variant name is lower-case" in result.err
    result = zoo("import", "nanogpt", str(checkpoint), "--name", "nano-bpe", "--tokenizer", str(ROOT / "checkpoints" / "bpe-1024.tiktoken"))
    assert result.code == 1 and "1024 tokens but the card says 65" in result.err


class _RunsCode:
    """Unpickling this calls os.system: what a hostile checkpoint would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused(tmp_path, zoo_home, zoo):
    marker = tmp_path / "pwned"
    hostile = tmp_path / "ckpt.pt"
    torch.save({"model": {}, "model_args": {}, "payload": _RunsCode(marker)}, hostile)
    result = zoo("import", "nanogpt", str(hostile), "--name", "hostile")
    assert result.code == 1
    assert len(result.err.strip().splitlines()) == 1
    assert "refused" in result.err and "nothing is run" in result.err
    assert not marker.exists()
    assert not (zoo_home / "registry.toml").exists()
    torch.load(hostile, weights_only=False)  # proof the payload is live: unsafe loading does run it
    assert marker.exists()


def test_not_a_checkpoint_is_one_line(tmp_path, zoo_home, zoo):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a pickle at all")
    result = zoo("import", "nanogpt", str(junk), "--name", "junk")
    assert result.code == 1 and len(result.err.strip().splitlines()) == 1
    with pytest.raises(ZooError, match="checkpoint file not found"):
        from zoo_core.interop.nanogpt import read_nanogpt_checkpoint

        read_nanogpt_checkpoint(tmp_path / "missing.pt")
