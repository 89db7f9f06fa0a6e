"""Hugging Face transformers: `zoo export --format hf` and `zoo import hf`.

Needs the `interop` extra (transformers); without it the module is skipped
with that reason, and CI installs it.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the interop extra is not installed: pip install -e '.[interop]'")

import zoo_core  # noqa: E402
from zoo_core.corpus.batches import split_text  # noqa: E402
from zoo_core.corpus.datasets import read_text_file  # noqa: E402
from zoo_core.plugin_api.manager import get_plugins  # noqa: E402

from .conftest import ROOT  # noqa: E402

VALIDATION = split_text(read_text_file(ROOT / "data" / "tinyshakespeare.txt").text, 0.9)[1]


class _Exports(dict):
    """Each variant exported (through the CLI) once for the module, when first asked for."""

    def __init__(self, factory):
        super().__init__()
        self.factory = factory

    def __missing__(self, name):
        from zoo_core import cli

        folder = self.factory.mktemp(name)
        assert cli.main(["export", name, "--format", "hf", "--out", str(folder)]) == 0
        self[name] = folder
        return folder


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return _Exports(tmp_path_factory)


@pytest.mark.parametrize("name", ["gpt-char-mini", "transformer-6b-sin"])
def test_transformers_loads_the_export_with_the_zoos_logits_and_ids(exported, name):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = zoo_core.load(name)
    hf_model = AutoModelForCausalLM.from_pretrained(exported[name]).eval()
    hf_tokenizer = AutoTokenizer.from_pretrained(exported[name])
    assert type(hf_model).__name__ == "GPT2LMHeadModel"
    # The first 64 validation characters (gpt-char-mini) or its first context of tokens.
    ids = model.tokenizer.encode(VALIDATION[:64])[: model.card.context_length]
    assert hf_tokenizer(VALIDATION[:64])["input_ids"][: len(ids)] == ids
    with torch.no_grad():
        theirs = hf_model(torch.tensor([ids])).logits
        ours, _ = model.network(torch.tensor([ids]))
    assert theirs.shape == ours.shape
    assert float((theirs - ours).abs().max()) <= 1e-4
    assert hf_tokenizer(VALIDATION, verbose=False)["input_ids"] == model.tokenizer.encode(VALIDATION)
    assert hf_tokenizer.decode(ids) == model.tokenizer.decode(ids)


@pytest.mark.parametrize("name, reason", [
    ("transformer-1b-learned-post-ctx8", "post-norm blocks"),
    ("gpt-char-mini-rope", "Llama's layout has RoPE and RMSNorm, but no bias on its vocabulary head"),
    ("bigram", "is a bigram model"),
    ("gpt-char-speedrun", "mlp 'relu2' has no GPT-2 counterpart"),
])
def test_unmappable_variants_are_refused_in_one_line(zoo, tmp_path, name, reason):
    result = zoo("export", name, "--format", "hf", "--out", str(tmp_path / "out"))
    assert result.code == 1 and reason in result.err
    assert len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_tiny_gpt2_imports_with_its_logits(tmp_path, zoo):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    reference = GPT2LMHeadModel(GPT2Config(vocab_size=65, n_positions=32, n_embd=32, n_layer=2, n_head=2)).eval()
    reference.save_pretrained(tmp_path / "tiny")
    result = zoo("import", "hf", str(tmp_path / "tiny"), "--name", "tiny-gpt2")
    assert result.code == 0, result.err
    model = zoo_core.load("tiny-gpt2")
    assert model.card.config["mlp"] == "gelu-tanh" and model.card.config["tie_embeddings"]
    ids = torch.tensor([model.tokenizer.encode(VALIDATION[:32])])
    with torch.no_grad():
        assert float((reference(ids).logits - model.network(ids)[0]).abs().max()) <= 1e-5
    assert model.card.parameters == sum(p.numel() for p in reference.parameters())


def test_export_then_import_round_trip(exported, zoo):
    assert zoo("import", "hf", str(exported["transformer-6b-sin"]), "--name", "sin-again").code == 0
    get_plugins(reload=True)
    original, again = zoo_core.load("transformer-6b-sin"), zoo_core.load("sin-again")
    assert again.card.tokenizer.kind == "bpe"
    ids = torch.tensor([original.tokenizer.encode(VALIDATION[:200])[:32]])
    with torch.no_grad():
        assert float((original.network(ids)[0] - again.network(ids)[0]).abs().max()) <= 1e-4


def test_import_refuses_pickled_weights_and_other_models(tmp_path, zoo):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    result = zoo("import", "hf", str(folder), "--name", "x")
    assert result.code == 1 and "model_type 'bert'; the layouts that import are gpt2, llama" in result.err
    (folder / "config.json").write_text('{"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "n_head": 1, "n_positions": 8}')
    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    result = zoo("import", "hf", str(folder), "--name", "x")
    assert result.code == 1 and "no model.safetensors" in result.err and len(result.err.strip().splitlines()) == 1


def test_a_failed_export_leaves_the_out_folder_as_it_was(zoo, tmp_path):
    # The card's training text changes under it: the export fails only after
    # writing every file (its checks read that text), so this is the worst case.
    verses = tmp_path / "verses.txt"
    verses.write_text(VALIDATION[:20000])
    trained = zoo("train", "gpt-char-mini", "--steps", "2", "--publish", "--name", "my-mini", "--data", str(verses),
                  "--quiet", "--set", "eval_windows=2")
    assert trained.code == 0, trained.err
    verses.write_text(VALIDATION[:20000].replace("the", "teh"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("kept\n")
    for form in ("hf", "onnx"):
        failed = zoo("export", "my-mini", "--format", form, "--out", str(out))
        assert failed.code == 1 and failed.err.count("\n") == 1 and "sha256" in failed.err, failed.err
        assert [p.name for p in out.iterdir()] == ["mine.txt"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "verses.txt"]  # no staging folder left behind
    fresh = tmp_path / "fresh"
    assert zoo("export", "my-mini", "--format", "hf", "--out", str(fresh)).code == 1 and not fresh.exists()


def test_the_import_shows_its_progress_stage_by_stage(exported, zoo):
    """On a terminal a bar counts the weights files read, then the hashing, checking and writing."""
    import io

    from zoo_core.interop.hf import import_hf
    from zoo_core.training.progress import WorkProgress

    screen = io.StringIO()
    card, _ = import_hf(exported["gpt-char-mini"], "shown", progress=WorkProgress("import shown", stream=screen, interactive=True))
    assert card.name == "shown"
    drawn = screen.getvalue()
    assert "import shown: reading weights" in drawn and "import shown: hashing, checking, writing" in drawn
