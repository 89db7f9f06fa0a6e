"""The card reference is generated from the card models and kept in step with them."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from zoo_core.catalogue.card_docs import card_schema, cards_markdown
from zoo_core.catalogue.cards import ModelCard, Recipe

from .conftest import ROOT


def test_docs_cards_md_is_what_the_card_models_generate():
    written = (ROOT / "docs" / "cards.md").read_text(encoding="utf-8")
    assert written == cards_markdown() + "\n", "docs/cards.md is stale: run `zoo card-schema --markdown > docs/cards.md`"


@pytest.mark.parametrize("model", [ModelCard, Recipe])
def test_every_field_is_described_in_the_reference(model):
    reference = cards_markdown()
    for name, info in model.model_fields.items():
        assert info.description, f"{model.__name__}.{name} has no description"
        assert f"| `{name}` |" in reference


def test_the_reference_says_which_fields_define_the_weights():
    rows = {line.split("|")[1].strip(): line.split("|")[4].strip() for line in cards_markdown().splitlines()
            if line.startswith("| `")}
    assert rows["`architecture`"] == "yes" and rows["`seed`"] == "yes" and rows["`kind`"] == "yes"
    assert rows["`description`"] == "no" and rows["`license`"] == "no" and rows["`tags`"] == "no"


def test_card_schema_prints_the_json_schema_that_validation_uses(zoo):
    done = zoo("card-schema")
    assert done.code == 0
    schema = json.loads(done.out)
    assert schema == card_schema()
    assert "license" in schema["required"] and schema["additionalProperties"] is False


def test_a_card_without_a_license_is_refused_rather_than_given_one():
    table = {
        "name": "no-license", "description": "d", "architecture": "bigram", "lineage": "test", "context_length": 8,
        "tokenizer": {"kind": "bpe", "vocab_size": 1024}, "checkpoint": {"path": "x.safetensors"},
    }
    with pytest.raises(ValidationError, match="license"):
        ModelCard.model_validate(table)
    assert ModelCard.model_validate({**table, "license": "CC-BY-4.0"}).license == "CC-BY-4.0"
