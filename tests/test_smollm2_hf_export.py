"""SmolLM2 imported from its GGUF file (the shared `smollm2_home`), exported with
`zoo export --format hf`: the folder keeps the chat (template, end-of-turn token,
eos in generation_config.json), so a chat through transformers stops where the
zoo's does; its README describes the model truthfully (licence, family, no
training text it never saw); and its card holds provenance, not a made-up recipe."""

from __future__ import annotations

import json

import pytest

from .conftest import SMOLLM2_NAME
from .references import SMOLLM2, SMOLLM2_SHA256

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed")
pytest.importorskip("gguf", reason="the gguf extra is not installed")
huggingface_hub = pytest.importorskip("huggingface_hub", reason="the hf extra is not installed")

pytestmark = [pytest.mark.slow, pytest.mark.smollm2]

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def exported(smollm2_home, tmp_path_factory):
    """The HF folder of the imported SmolLM2, written once by `zoo export`."""
    from zoo_core import cli

    out = tmp_path_factory.mktemp("smollm2-hf") / "folder"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_HOME", str(smollm2_home))
        patch.setenv("ZOO_CACHE", str(tmp_path_factory.mktemp("cache")))
        assert cli.main(["export", SMOLLM2_NAME, "--format", "hf", "--out", str(out)]) == 0
    return out


def test_the_export_keeps_the_chat_template_and_its_end(exported):
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    generation = json.loads((exported / "generation_config.json").read_text())
    assert generation["eos_token_id"] == end
    assert json.loads((exported / "config.json").read_text())["eos_token_id"] == end


def test_a_chat_through_transformers_stops_where_the_zoos_does(exported, smollm2_home, monkeypatch):
    import torch

    from zoo_core.inference.chat import chat_stops, render_chat
    from zoo_core.loading.api import load

    tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
    model = transformers.AutoModelForCausalLM.from_pretrained(exported).eval()
    ids = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, do_sample=False, max_new_tokens=60)
    theirs = out[0, ids["input_ids"].shape[1]:].tolist()

    monkeypatch.setenv("ZOO_HOME", str(smollm2_home))
    zoo_model = load(SMOLLM2_NAME)
    spec = zoo_model.card.chat
    (ours,) = zoo_model.sample(render_chat(spec, QUESTION), max_new_tokens=60, temperature=0, stop=chat_stops(spec))
    assert ours.finish_reason == "stop" and "Paris" in ours.text
    # transformers stops on the end-of-turn token, which it keeps; the zoo draws the same tokens up to it.
    assert theirs == ours.tokens and len(theirs) < 60
    assert theirs[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.decode(theirs, skip_special_tokens=True) == ours.text


def test_the_readme_describes_the_imported_model_truthfully(exported):
    data = huggingface_hub.ModelCard.load(exported / "README.md").data.to_dict()
    assert data["license"] == "apache-2.0"
    assert "llama" in data["tags"] and "gpt2" not in data["tags"] and "conversational" in data["tags"]
    assert "datasets" not in data  # it was not trained on the zoo's Shakespeare
    assert data["zoo"]["imported"]["sha256"] == SMOLLM2_SHA256 and data["zoo"]["imported"]["file"] == SMOLLM2
    text = (exported / "README.md").read_text()
    assert "tinyshakespeare" not in text and "## Recipe" not in text and "## Provenance" in text


def test_the_imported_card_has_provenance_and_no_recipe(smollm2_home, monkeypatch, zoo):
    monkeypatch.setenv("ZOO_HOME", str(smollm2_home))
    shown = zoo("show", SMOLLM2_NAME, "--json")
    assert shown.code == 0
    card = json.loads(shown.out)
    assert "recipe" not in card
    assert card["imported"] == {
        "format": "GGUF llama",
        "file": SMOLLM2,
        "sha256": SMOLLM2_SHA256,
        "notes": card["imported"]["notes"],
    }
    assert (card["license"], card["family"], card["parameters"]) == ("apache-2.0", "llama", 134_515_008)
    # `zoo list` shows the norm its card says (TransformerConfig's default block, RMSNorm), and no
    # validation figures: its paragraph perplexity is the import's, not a validation split's.
    (row,) = json.loads(zoo("list", SMOLLM2_NAME, "--json").out)
    assert row["norm"] == "pre-RMS" and row["validation_loss"] is None and row["validation_data"] is None
    # Training it again would need a recipe it never had: one line, naming the fine-tune instead.
    refused = zoo("train", SMOLLM2_NAME, "--steps", "1")
    assert refused.code != 0 and "Traceback" not in refused.err
    assert f"zoo train NEW --from {SMOLLM2_NAME}" in refused.err and len(refused.err.strip().splitlines()) == 1
