"""SmolLM2-135M-Instruct imported from its GGUF file (the shared `smollm2_home`
fixture) against transformers' own GGUF loader, offline; the docs' commands."""

from __future__ import annotations

import re
import shlex

import pytest
import torch

from zoo_core.loading.api import load

from .conftest import ROOT, SMOLLM2_NAME
from .references import SMOLLM2, reference

transformers = pytest.importorskip("transformers", reason="the interop extra is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.smollm2]

PROMPTS = [
    "The capital of France is",
    "<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village by the sea,",
]
# Both sides dequantise the same bytes with the same package to the same float32
# values; what differs is the order of float32 sums (the zoo's fused qkv and
# gate/up matrices, another attention kernel) over 30 layers, ~1e-6 relative
# per layer. Measured: at most 5.8e-5 on logits of magnitude 27 to 36; 1e-3 leaves
# room for another CPU's kernels and is far below a real mistake (a wrong row
# order or epsilon moves logits by whole units).
LOGIT_TOLERANCE = 1e-3


@pytest.fixture
def smollm2(smollm2_home, monkeypatch):
    monkeypatch.setenv("ZOO_HOME", str(smollm2_home))
    return load(SMOLLM2_NAME)


def test_logits_equal_transformers_gguf_loader(smollm2):
    path = reference(SMOLLM2)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).eval()
    for prompt in PROMPTS:
        ids = torch.tensor([smollm2.tokenizer.encode(prompt)])
        with torch.no_grad():
            ours, _ = smollm2.network(ids)
            expected = theirs(ids).logits
        assert (ours - expected).abs().max() < LOGIT_TOLERANCE
        assert torch.equal(ours.argmax(-1), expected.argmax(-1))


def test_the_card_holds_what_the_file_says(smollm2):
    card = smollm2.card
    assert card.license == "apache-2.0"
    assert card.config["n_layer"] == 30 and card.config["n_kv_head"] == 3 and card.config["tie_embeddings"]
    assert card.config["norm_eps"] == 1e-5 and card.config["rope_base"] == 100000.0
    assert card.context_length == 8192 and card.parameters == 134_515_008
    assert (card.chat.bos_token, card.chat.eos_token, card.chat.stop) == ("<|im_start|>", "<|im_end|>", ["<|im_end|>"])
    assert "gguf-q4_1" in card.tags and "210 Q4_1, 61 F32, 1 Q8_0 tensors" in card.imported.notes
    assert "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53" in card.lineage
    # Its provenance, and no training recipe it never had (which set eval's defaults and leaked into exports).
    sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert card.recipe is None and (card.imported.format, card.imported.sha256) == ("GGUF llama", sha256)
    assert card.imported.file == SMOLLM2 and card.family == "llama"
    assert 5 < card.metrics.paragraph_perplexity < 100 and 0.5 < card.metrics.paragraph_bits_per_byte < 2


def test_the_docs_commands(smollm2_home, monkeypatch, zoo):
    """docs/interop.md's `zoo import gguf` block: its import is the one the
    shared fixture ran; the rest run here, on it (" Paris", greedy)."""
    section = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8").split("## GGUF files")[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [shlex.split(line) for line in block.splitlines() if line.startswith("zoo ")]
    assert commands[0] == ["zoo", "import", "gguf", SMOLLM2, "--name", SMOLLM2_NAME, "--dequantize"]
    monkeypatch.setenv("ZOO_HOME", str(smollm2_home))
    for command in commands[1:]:
        result = zoo(*command[1:])
        assert result.code == 0, result.err
    assert result.out.startswith("The capital of France is Paris")
