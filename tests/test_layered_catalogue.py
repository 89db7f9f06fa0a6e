"""Layered catalogues, publishing into the user's own, removal, datasets by name,
and what may be edited in a card without retraining.

Every test runs with its own ZOO_HOME and ZOO_CACHE (conftest's autouse
fixture): nothing here touches ~/.local/share or ~/.cache.
"""

from __future__ import annotations

import json

from zoo_core.catalogue.registry import read_registry_file, render_registry
from zoo_core.plugin_api.manager import get_plugins

from .conftest import ROOT


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def _card(name):
    return next(v.card for v in read_registry_file(ROOT / "registry.toml", "catalogue") if v.name == name)


def test_an_extra_registry_adds_variants_and_keeps_the_built_in_ones(zoo, tmp_path, monkeypatch):
    extra = tmp_path / "extra.toml"
    extra.write_text(render_registry([_card("bigram").model_copy(update={"name": "bigram-elsewhere"})]))
    built_in = [row["name"] for row in json.loads(zoo("list", "--json").out)]
    monkeypatch.setenv("ZOO_REGISTRY", str(extra))
    rows = {row["name"]: row["source"] for row in json.loads(zoo("list", "--json").out)}
    assert list(rows) == [*built_in, "bigram-elsewhere"]
    assert rows["bigram-elsewhere"] == "extra" and rows["bigram"] == "built-in"
    assert [row["name"] for row in json.loads(zoo("list", "--source", "extra", "--json").out)] == ["bigram-elsewhere"]
    monkeypatch.delenv("ZOO_REGISTRY")
    # --registry does the same, before or after the command
    assert "bigram-elsewhere" in zoo("--registry", str(extra), "list").out
    assert "bigram-elsewhere" in zoo("list", "--registry", str(extra)).out
    _one_line_error(zoo("list", "--registry", str(tmp_path / "missing.toml")), "missing.toml: registry file not found")


def test_a_name_in_two_layers_is_refused_with_both_files_named(zoo, private_home):
    private_home.mkdir(parents=True)
    (private_home / "registry.toml").write_text(render_registry([_card("bigram")]))
    listed = zoo("list")
    assert listed.code == 0
    assert f"variant 'bigram' is declared twice: in the built-in catalogue ({ROOT / 'registry.toml'}) " in listed.err
    assert f"and in the user catalogue ({private_home / 'registry.toml'})" in listed.err
    assert [line for line in listed.out.splitlines() if line.startswith("bigram ")][0].endswith("built-in")
    verified = zoo("verify", "bigram", "--json")
    assert verified.code == 1
    assert any("declared twice" in row["detail"] for row in json.loads(verified.out) if row["status"] == "FAILED")


def test_publish_compare_eval_and_remove(zoo, tmp_path, private_home):
    text = tmp_path / "verses.txt"
    text.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text()[:60000])
    refused = zoo("train", "bigram", "--steps", "3", "--publish", "--quiet")
    _one_line_error(refused, "variant 'bigram' already exists in the built-in catalogue", "--name NEW")

    trained = zoo("train", "bigram", "--steps", "3", "--publish", "--name", "my-bigram", "--data", str(text), "--quiet")
    assert trained.code == 0, trained.err
    registry = private_home / "registry.toml"
    assert f"card in {registry}" in trained.out
    (mine,) = read_registry_file(registry, "user")
    assert mine.card.recipe.data == str(text) and len(mine.card.recipe.data_sha256) == 64
    assert mine.card.tokenizer.sha256 is not None and mine.tokenizer_path.parent == private_home / "checkpoints"
    (row,) = json.loads(zoo("list", "--source", "user", "--json").out)
    # its validation loss is on the held-out end of the user's text, and the listing says so
    assert row["name"] == "my-bigram" and row["validation_data"] == "verses.txt"
    assert "verses.txt" in zoo("list", "my-bigram").out.splitlines()[2].split()

    # trained on other text than bigram: compare refuses in either order, unless told which text
    for names in (("bigram", "my-bigram"), ("my-bigram", "bigram")):
        _one_line_error(zoo("compare", *names, "--windows", "4"), "trained on", "--data NAME")
    compared = zoo("compare", "my-bigram", "bigram", "--windows", "4", "--max-new-tokens", "3", "--data", "tinyshakespeare", "--json")
    assert compared.code == 0, compared.err
    assert json.loads(compared.out)["dataset"] == "tinyshakespeare"
    evaluated = json.loads(zoo("eval", "my-bigram", "--windows", "4", "--json").out)
    assert evaluated["dataset"] == str(text)

    # the file a card was trained on may not change under it
    text.write_text(text.read_text().replace("the", "teh"))
    _one_line_error(zoo("eval", "my-bigram", "--windows", "4"), f"{text}: sha256 ", "is not that of the text the card was trained on")

    _one_line_error(zoo("remove", "bigram"), "variant 'bigram' belongs to the built-in catalogue", "only your own variants")
    checkpoint = private_home / "checkpoints" / "my-bigram.safetensors"
    assert checkpoint.exists()
    removed = zoo("remove", "my-bigram")
    assert removed.code == 0 and not checkpoint.exists() and not checkpoint.with_suffix(".history.json").exists()
    # the run's log outlives the weights, and the command says where it is
    logs = private_home / "runs" / "my-bigram"
    assert logs.is_dir() and f"kept its run logs in {logs}" in removed.out
    assert not mine.tokenizer_path.exists()  # no other card used that copy
    assert "my-bigram" not in zoo("list").out
    _one_line_error(zoo("remove", "my-bigram"), "unknown variant 'my-bigram'")


def test_datasets_are_listed_with_their_checksum(zoo):
    result = zoo("datasets", "--json")
    (dataset,) = json.loads(result.out)
    assert dataset["name"] == "tinyshakespeare" and dataset["plugin"] == "catalogue" and dataset["train_fraction"] == 0.9
    assert dataset["sha256"] == (ROOT / "data" / "tinyshakespeare.txt.sha256").read_text().split()[0]


def test_descriptive_fields_may_be_edited_without_retraining(zoo, private_catalogue):
    text = private_catalogue.read_text()
    start = text.index("[transformer-1b-learned-ctx8]")
    section = text[start:text.index("[transformer-2b", start)]
    edited = (section.replace("description = \"1 pre-norm", "description = \"Edited: 1 pre-norm")
              .replace('license = "MIT"', 'license = "CC0-1.0"')
              .replace('tags = ["', 'tags = ["edited", "'))
    assert edited != section
    private_catalogue.write_text(text.replace(section, edited))
    get_plugins(reload=True)
    assert zoo("load", "transformer-1b-learned-ctx8").code == 0
    private_catalogue.write_text(text.replace(section, section.replace("steps = 10000", "steps = 9999")))
    _one_line_error(zoo("load", "transformer-1b-learned-ctx8"), "disagrees with the registry at 'recipe.steps'")


def test_locks_live_in_the_cache_folder_not_beside_the_files(zoo, private_catalogue, private_home):
    assert zoo("verify", "bigram").code == 0
    assert not list(private_catalogue.parent.rglob("*.lock"))
    locks = list((private_home.parent / "cache" / "locks").glob("*-registry.toml.lock"))
    assert locks, "verify took no lock"


def test_publishing_into_a_named_registry_retrains_in_place(zoo, private_catalogue):
    # How the repository's own variants are retrained: --registry names the file that declares them.
    result = zoo("train", "bigram", "--steps", "2", "--publish", "--registry", str(private_catalogue), "--quiet")
    assert result.code == 0, result.err
    (bigram,) = [v for v in read_registry_file(private_catalogue, "catalogue") if v.name == "bigram"]
    assert bigram.card.recipe.steps == 2 and bigram.checkpoint_path == private_catalogue.parent / "checkpoints" / "bigram.safetensors"
    assert zoo("load", "bigram").code == 0


def test_a_name_declared_twice_is_refused_by_every_command_that_resolves_it(zoo, private_home, tmp_path):
    private_home.mkdir(parents=True)
    (private_home / "registry.toml").write_text(render_registry([_card("bigram")]))
    both = (f"variant 'bigram' is declared twice: in the built-in catalogue ({ROOT / 'registry.toml'})",
            f"and in the user catalogue ({private_home / 'registry.toml'}); rename or remove one")
    for args in (("load", "bigram"), ("show", "bigram"), ("eval", "bigram", "--windows", "2"),
                 ("sample", "bigram", "--prompt", "A"), ("compare", "bigram", "transformer-1b-learned-ctx8"),
                 ("export", "bigram", "--format", "hf", "--out", str(tmp_path / "hf")),
                 ("train", "bigram", "--steps", "1", "--out", str(tmp_path / "run"))):
        _one_line_error(zoo(*args), *both)
    assert zoo("remove", "bigram").code == 0  # the way out the line names: remove your copy
    assert zoo("load", "bigram").code == 0


def test_the_command_zoo_train_out_prints_uses_the_new_weights(zoo, tmp_path):
    import shlex

    tiny = "transformer-1b-learned-ctx8"
    shipped = zoo("sample", tiny, "--prompt", "ROMEO:", "--max-new-tokens", "12", "--seed", "1")
    for extra, option in (((), "--only-registry"), (("--name", "tiny-run"), "--registry")):
        trained = zoo("train", tiny, "--steps", "2", "--out", str(tmp_path / option), "--quiet", *extra)
        assert trained.code == 0, trained.err
        (line,) = [line for line in trained.out.splitlines() if "use it:" in line]
        command = shlex.split(line.split("use it:")[1].replace("--prompt ...", ""))
        assert command[:2] == ["zoo", option]  # the same name as a shipped variant: its file alone
        sampled = zoo(*command[1:], "--prompt", "ROMEO:", "--max-new-tokens", "12", "--seed", "1")
        assert sampled.code == 0, sampled.err
        assert sampled.out != shipped.out  # two steps of training, not the shipped weights


CONTROL = "del\x7f nul\x00 esc\x1b bell\x07 tab\t newline\n cr\r ls\u2028 end"


def test_control_characters_round_trip_through_every_toml_file_the_zoo_writes(zoo, private_home, tmp_path):
    # TOML forbids raw control characters (U+007F included) in strings: written escaped, read back as they were.
    card = _card("bigram").model_copy(update={"name": "bigram-controls", "description": CONTROL})
    registry = tmp_path / "registry.toml"
    registry.write_text(render_registry([card]))
    (read,) = read_registry_file(registry, "extra")
    assert read.card.description == CONTROL

    text = tmp_path / "notes.txt"
    text.write_text("some text of mine\n" * 100)
    assert zoo("datasets", "add", "notes", str(text), "--description", CONTROL).code == 0
    (mine,) = [row for row in json.loads(zoo("datasets", "--json").out) if row["name"] == "notes"]
    assert mine["description"] == CONTROL

    url = f"file://{tmp_path}/shared\x7f"
    assert zoo("remote", "add", "team", url).code == 1  # a URL is printable ASCII: refused, not written
    (private_home / "remotes.toml").write_text(f'[remotes.team]\nurl = "file://{tmp_path}/shared\\u007f"\n')
    assert json.loads(zoo("remote", "list", "--json").out)[0]["url"] == url  # a hand-written one reads back as it is
    assert zoo("list").code == 0  # the user's files all still read
