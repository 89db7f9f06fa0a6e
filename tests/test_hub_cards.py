"""Hub-ready model cards (`zoo export --format hf` writes README.md, `zoo import hf`
reads it back) and component provenance (`components` in the card, `zoo show`).

The Hub's own checks are those huggingface_hub runs locally: ``ModelCard.load``
parses the front matter into ``ModelCardData``, which reads the model-index with
``model_index_to_eval_results`` and refuses a malformed one. The Hub's
server-side validation endpoint is not reachable offline.
"""

from __future__ import annotations

import importlib.metadata
import json
import random
import shutil

import pytest

pytest.importorskip("transformers", reason="the interop extra is not installed: pip install -e '.[interop]'")
huggingface_hub = pytest.importorskip("huggingface_hub")

import zoo_core  # noqa: E402
from zoo_core import cli  # noqa: E402
from zoo_core.interop.hf_card import hub_license, hub_readme  # noqa: E402
from zoo_core.plugin_api.manager import get_plugins  # noqa: E402
from zoo_core.plugin_api.sources import component_sources  # noqa: E402
from zoo_core.storage.checkpoints import header_card  # noqa: E402

ZOO_VERSION = importlib.metadata.version("zoo-lm")


@pytest.fixture(scope="module")
def exported_mini(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mini")
    assert cli.main(["export", "gpt-char-mini", "--format", "hf", "--out", str(folder)]) == 0
    return folder


def _own_text() -> str:
    words = "the cat sat on a mat and then the dog ran to the park".split()
    rng = random.Random(3)
    return "\n".join(" ".join(rng.choice(words) for _ in range(10)) for _ in range(400)) + "\n"


@pytest.fixture
def fine_tuned(zoo, tmp_path, monkeypatch):
    """gpt-char-mini fine-tuned for two steps on a private file (the user catalogue holds it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text(_own_text(), encoding="utf-8")
    result = zoo("train", "mini-notes", "--from", "gpt-char-mini", "--data", str(tmp_path / "notes.txt"),
                 "--steps", "2", "--set", "eval_windows=8", "--quiet")
    assert result.code == 0, result.err
    get_plugins(reload=True)
    return zoo_core.get_variant("mini-notes")


def test_the_exported_readme_is_a_hub_card_huggingface_hub_accepts(exported_mini):
    from huggingface_hub import ModelCard, metadata_load
    from huggingface_hub.repocard_data import eval_results_to_model_index, model_index_to_eval_results
    from transformers import AutoModelForCausalLM

    card = zoo_core.get_variant("gpt-char-mini").card
    hub = ModelCard.load(exported_mini / "README.md")  # refuses a model-index it cannot read
    data = hub.data.to_dict()
    assert data["license"] == "mit" and "license_name" not in data
    assert data["library_name"] == "transformers" and data["pipeline_tag"] == "text-generation"
    assert set(card.tags) | {"zoo", "gpt", "gpt2"} <= set(data["tags"])
    assert data["datasets"] == ["tinyshakespeare"] and "base_model" not in data
    assert data["zoo"]["variant"] == "gpt-char-mini" and data["zoo"]["checkpoint_sha256"] == card.checkpoint.sha256

    model_index = metadata_load(exported_mini / "README.md")["model-index"]
    name, results = model_index_to_eval_results(model_index)
    assert name == "gpt-char-mini"
    values = {r.metric_type: r.metric_value for r in results}
    assert values == {"loss": card.metrics.validation_loss, "bits_per_byte": card.metrics.validation_bits_per_byte}
    assert {(r.task_type, r.dataset_type, r.dataset_split) for r in results} == {
        ("text-generation", "tinyshakespeare", "validation")}
    assert eval_results_to_model_index(name, results) == model_index  # round-trips through the library
    assert hub.text.lstrip().startswith("# gpt-char-mini") and "from_pretrained" in hub.text
    assert "zoo import hf" in hub.text and "| learning_rate | `0.001` |" in hub.text
    assert type(AutoModelForCausalLM.from_pretrained(exported_mini)).__name__ == "GPT2LMHeadModel"


def test_a_license_the_hub_has_no_identifier_for_is_other_with_its_own_file():
    from huggingface_hub import ModelCard

    assert hub_license("MIT") == ("mit", None) and hub_license(" Apache 2.0 ") == ("apache-2.0", None)
    assert hub_license("unspecified") == ("unknown", None)
    words = "TechAarvam workshop material: free to use and build on, crediting TechAarvam"
    license_id, license_name = hub_license(words)
    assert license_id == "other" and license_name and license_name.startswith("techaarvam-workshop-material")
    card = zoo_core.get_variant("gpt-char-mini").card.model_copy(update={"license": words})
    data = ModelCard(hub_readme(card)).data.to_dict()
    assert (data["license"], data["license_name"], data["license_link"]) == ("other", license_name, "LICENSE")
    assert data["zoo"]["license"] == words


def test_import_reads_the_card_back_without_claiming_its_metrics(exported_mini, zoo):
    original = zoo_core.get_variant("gpt-char-mini").card
    assert zoo("import", "hf", str(exported_mini), "--name", "mini-back").code == 0
    get_plugins(reload=True)
    card = zoo_core.get_variant("mini-back").card
    assert card.license == "MIT" and card.description == original.description
    assert set(original.tags) | {"imported"} <= set(card.tags)
    # Trained elsewhere (by the zoo, then exported): no recipe, the README's registered dataset to score on.
    assert card.recipe is None and card.imported.dataset == "tinyshakespeare"
    assert card.metrics.validation_loss is None  # reported by the README, not measured here
    assert f"validation loss (nats per token) {original.metrics.validation_loss}" in card.imported.notes
    assert "exported from the zoo variant 'gpt-char-mini'" in card.imported.notes
    assert set(card.components) == {"model", "tokenizer", "positions", "block"}  # no trainer: trained elsewhere
    assert card.components["model"].distribution == "zoo-lm" and card.components["model"].version == ZOO_VERSION

    assert zoo("import", "hf", str(exported_mini), "--name", "mini-mine", "--license", "CC-BY-4.0").code == 0
    get_plugins(reload=True)
    assert zoo_core.get_variant("mini-mine").card.license == "CC-BY-4.0"  # given beats the README's


def test_a_missing_or_malformed_readme_is_no_error(exported_mini, zoo, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(exported_mini, folder)
    (folder / "README.md").unlink()
    result = zoo("import", "hf", str(folder), "--name", "no-readme")
    assert result.code == 0 and result.err == ""
    (folder / "README.md").write_text("---\nlicense: [mit\ntags: {\n---\n# x\n", encoding="utf-8")
    result = zoo("import", "hf", str(folder), "--name", "bad-readme")
    assert result.code == 0
    assert result.err.count("\n") == 1 and "front matter is not valid YAML" in result.err
    (folder / "README.md").write_text("---\n- a list\n---\n", encoding="utf-8")
    result = zoo("import", "hf", str(folder), "--name", "list-readme")
    assert result.code == 0 and "not a table" in result.err and result.err.count("\n") == 1
    (folder / "README.md").write_text("Just prose, no front matter.\n", encoding="utf-8")
    result = zoo("import", "hf", str(folder), "--name", "prose-readme")
    assert result.code == 0 and result.err == ""
    get_plugins(reload=True)
    assert zoo_core.get_variant("prose-readme").card.description == "Just prose, no front matter."
    assert zoo_core.get_variant("bad-readme").card.license == "unspecified"


def test_train_records_the_plugins_and_show_prints_the_provenance(fine_tuned, zoo, tmp_path):
    card = fine_tuned.card
    assert set(card.components) == {"model", "tokenizer", "positions", "block", "trainer"}
    assert {role: (s.name, s.plugin, s.distribution, s.version) for role, s in card.components.items()} == {
        "model": ("gpt", "gpt", "zoo-lm", ZOO_VERSION),
        "tokenizer": ("char", "chars", "zoo-lm", ZOO_VERSION),
        "positions": ("learned", "positions", "zoo-lm", ZOO_VERSION),
        "block": ("pre-norm", "blocks", "zoo-lm", ZOO_VERSION),
        "trainer": ("trained", "trainers", "zoo-lm", ZOO_VERSION),
    }
    assert component_sources(card, get_plugins()) == {r: s.model_dump() for r, s in card.components.items()}
    header = header_card(fine_tuned.checkpoint_path)
    assert header is not None and "components" not in header  # checkpoints read as they did before the field

    shown = zoo("show", "mini-notes")
    assert shown.code == 0
    assert "#   layer        user" in shown.out
    assert f"#   fine-tuned   from gpt-char-mini (sha256 {card.recipe.base_sha256})" in shown.out
    assert f"#     trainer    trained: plugin 'trainers' (zoo-lm {ZOO_VERSION})" in shown.out
    assert "[mini-notes.components.model]" in shown.out  # the card's own record, as TOML
    found = json.loads(zoo("show", "mini-notes", "--json").out)["provenance"]
    assert found["layer"] == "user" and found["declared_in"] == str(fine_tuned.source)
    assert found["base"] == {"name": "gpt-char-mini", "sha256": card.recipe.base_sha256}
    assert found["components_recorded"] is True and found["components"]["model"]["plugin"] == "gpt"

    builtin = json.loads(zoo("show", "gpt-char-mini", "--json").out)["provenance"]
    assert builtin["layer"] == "built-in" and builtin["components_recorded"] is False
    assert builtin["components"]["tokenizer"]["plugin"] == "chars" and "base" not in builtin


def test_a_fine_tunes_hub_card_names_its_zoo_base_but_no_hub_base_model(fine_tuned, tmp_path):
    from huggingface_hub import ModelCard

    assert cli.main(["export", "mini-notes", "--format", "hf", "--out", str(tmp_path / "out")]) == 0
    hub = ModelCard.load(tmp_path / "out" / "README.md")
    data = hub.data.to_dict()
    card = fine_tuned.card
    assert "base_model" not in data and "datasets" not in data  # a zoo name is no Hub id; the text is private
    assert data["zoo"]["base"] == {"name": "gpt-char-mini", "sha256": card.recipe.base_sha256}
    assert data["zoo"]["data"] == "private" and data["zoo"]["data_sha256"] == card.recipe.data_sha256
    assert data["zoo"]["components"]["trainer"]["distribution"] == "zoo-lm"
    results = hub.data.eval_results
    assert [(r.dataset_type, r.metric_type, r.metric_value) for r in results] == [
        ("private", "loss", card.metrics.validation_loss)]
    assert "Fine-tuned from the zoo variant `gpt-char-mini`" in hub.text
    assert str(tmp_path) not in (tmp_path / "out" / "README.md").read_text(encoding="utf-8")


def test_show_names_where_an_installed_archive_came_from(tmp_path, capsys):
    packed = tmp_path / "mini.zoo"
    assert cli.main(["pack", "gpt-char-mini", "--out", str(packed)]) == 0
    assert cli.main(["install", str(packed), "--name", "mini-copy"]) == 0
    capsys.readouterr()
    assert cli.main(["show", "mini-copy"]) == 0
    shown = capsys.readouterr().out
    [line] = [line for line in shown.splitlines() if line.startswith("#   installed")]
    assert str(packed) in line and len(line.rsplit("archive sha256 ", 1)[1]) == 64
    assert cli.main(["show", "mini-copy", "--json"]) == 0
    origin = json.loads(capsys.readouterr().out)["provenance"]["origin"]
    assert origin["source"] == str(packed) and len(origin["archive_sha256"]) == 64