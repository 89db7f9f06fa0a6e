"""Seed 003's hand-built "disobeys" puzzle transformer, loaded the way the zoo loads any variant."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
import torch

import zoo_core
from zoo_core.catalogue.registry import render_registry
from zoo_core.errors import ZooError
from zoo_core.loading.api import build_network, get_variant
from zoo_core.plugin_api.manager import get_plugins
from zoo_core.storage.checkpoints import header_card, sha256_file
from zoo_plugins.puzzle.build import build_all
from zoo_plugins.puzzle.model import PuzzleTransformer, build_puzzle, hand_set_state_dict
from zoo_plugins.puzzle.rule import expected_answer, well_formed_sentences
from zoo_plugins.puzzle.slots import VOCABULARY, slot_names
from zoo_plugins.puzzle.tokenizer import PuzzleTokenizer

ROOT = Path(__file__).resolve().parent.parent

# The four sentences seed 003 prints, with its output vectors and answers.
SEED_ANSWERS = [
    ("Human disobeys keep-flight disobeys swap-speech he-is?", "[1.00, 0.98]", "Flying Superhero"),
    ("Crow disobeys keep-flight swap-speech he-is?", "[0.02, 1.00]", "Human"),
    ("Crow keep-flight disobeys swap-speech he-is?", "[0.99, 0.00]", "Crow"),
    ("Crow disobeys keep-flight disobeys swap-speech he-is?", "[0.02, 0.00]", "Rock"),
]
SEED_PAIR = ("Crow disobeys keep-flight swap-speech he-is?", "Crow keep-flight disobeys swap-speech he-is?")


@pytest.fixture(scope="module")
def puzzle_files(tmp_path_factory):
    """The two checkpoints as `python -m zoo_plugins.puzzle.build` writes them, and a registry for them."""
    folder = tmp_path_factory.mktemp("puzzle-zoo")
    cards = build_all(folder / "checkpoints", folder)
    registry = folder / "registry.toml"
    registry.write_text(render_registry(cards), encoding="utf-8")
    return registry, cards


@pytest.fixture
def puzzle_zoo(puzzle_files, monkeypatch):
    """The built-in catalogue pointed at the puzzle registry; `zoo_core.load` works on it."""
    registry, _ = puzzle_files
    monkeypatch.setenv("ZOO_BUILTIN_REGISTRY", str(registry))
    get_plugins(reload=True)
    yield registry
    monkeypatch.delenv("ZOO_BUILTIN_REGISTRY")
    get_plugins(reload=True)


@pytest.fixture
def puzzle(puzzle_zoo):
    return zoo_core.load("puzzle-disobeys")


@pytest.fixture
def puzzle_nopos(puzzle_zoo):
    return zoo_core.load("puzzle-disobeys-nopos")


# -- the seed's numbers ----------------------------------------------------------------


@pytest.mark.parametrize("sentence, vector, answer", SEED_ANSWERS)
def test_seed_sentences_give_the_seeds_answers(puzzle, sentence, vector, answer):
    assert puzzle.network.ask(puzzle.tokenizer, sentence) == f"{answer}  {vector}"


def test_previous_word_head_attends_as_in_the_seed(puzzle):
    ids = puzzle.tokenizer.encode(SEED_PAIR[0])
    attention = puzzle.network.trace(torch.tensor(ids))["attention"]["previous_word"]
    expected = torch.zeros(5, 5)
    expected[0] = 0.2  # the first word has no previous word and spreads evenly
    expected[1:, :4] = torch.eye(4)  # every other word looks one back
    assert torch.allclose(attention, expected, atol=0.005)


def test_question_gathers_what_the_seed_shows(puzzle):
    network, words = puzzle.network, SEED_PAIR[0].split()
    trace = network.trace(torch.tensor(puzzle.tokenizer.encode(SEED_PAIR[0])))
    slot, question = network.slots, words.index("he-is?")
    assert trace["X1"][:, slot["previous_word_is_disobey"]].tolist() == pytest.approx([0.2, 0, 1, 0, 0], abs=0.005)
    assert trace["X1"][question, slot["object_attribute_fly"]].item() == pytest.approx(0.986, abs=0.001)
    gathered = ["is_swap_attr_fly", "is_attr_fly_disobeyed", "is_swap_attr_speak", "is_attr_speak_disobeyed"]
    assert [round(trace["X2"][question, slot[name]].item(), 2) for name in gathered] == [0.0, 1.0, 1.0, 0.0]


def test_network_shapes_follow_the_language_model_contract(puzzle):
    ids = torch.tensor([puzzle.tokenizer.encode(s) for s in SEED_PAIR])
    outputs, loss = puzzle.network(ids)
    assert outputs.shape == (2, 5, 2) and loss is None
    assert puzzle.network.context_length == 6
    maps = puzzle.network.attention_maps(ids)
    assert [m.shape for m in maps] == [(2, 2, 5, 5), (2, 2, 5, 5)]
    assert torch.allclose(maps[0].sum(-1), torch.ones(2, 2, 5))


# -- the score -----------------------------------------------------------------------


def test_rule_agrees_with_the_seed_and_enumerates_every_sentence():
    assert [expected_answer(s.split()) for s, _, _ in SEED_ANSWERS] == [a for _, _, a in SEED_ANSWERS]
    sentences = [" ".join(words) for words in well_formed_sentences(6)]
    # 4 objects x 2 flight x 2 speech actions x 2 orders x 4 disobey patterns
    assert len(sentences) == len(set(sentences)) == 128
    assert all(4 <= len(PuzzleTokenizer().encode(s)) <= 6 for s in sentences)


def test_puzzle_disobeys_solves_every_sentence(puzzle):
    report = puzzle.network.evaluate(puzzle.tokenizer)
    assert report == {"accuracy": 1.0, "correct": 128, "total": 128, "failures_total": 0, "failures": []}
    assert puzzle.card.metrics.accuracy == 1.0


def test_without_positions_both_orders_get_one_answer(puzzle, puzzle_nopos):
    with_positions = [puzzle.network.ask(puzzle.tokenizer, s).split("  ")[0] for s in SEED_PAIR]
    without = [puzzle_nopos.network.ask(puzzle_nopos.tokenizer, s) for s in SEED_PAIR]
    assert with_positions == ["Human", "Crow"]
    assert without[0] == without[1]
    assert puzzle_nopos.network.slots.width == 16
    assert puzzle_nopos.network.head_names == ["object", "flight", "speech"]


def test_without_positions_only_obeyed_sentences_are_right(puzzle_nopos):
    report = puzzle_nopos.network.evaluate(puzzle_nopos.tokenizer)
    assert (report["correct"], report["total"]) == (32, 128)  # the 32 sentences without "disobeys"
    assert report["accuracy"] == puzzle_nopos.card.metrics.accuracy == 0.25
    assert len(report["failures"]) == 10 and all("disobeys" in f for f in report["failures"])
    assert report["failures_total"] == 96  # the list is capped; the count is not


def test_eval_prints_the_real_failure_count(zoo):
    result = zoo("eval", "puzzle-disobeys-nopos")
    assert result.code == 0
    assert "failures: 96 (first 10 shown)" in result.out


# -- the checkpoints -----------------------------------------------------------------


@pytest.mark.parametrize("name, positions", [("puzzle-disobeys", True), ("puzzle-disobeys-nopos", False)])
def test_loaded_network_is_the_hand_set_one(puzzle_zoo, name, positions):
    fresh = build_network(get_variant(name))
    assert all(not t.any() for t in fresh.state_dict().values())  # the weights come from the checkpoint
    loaded = zoo_core.load(name)
    expected = hand_set_state_dict(positions)
    state = loaded.network.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], expected[k]) for k in expected)
    assert loaded.verification.checks == ["sha256", "names", "shapes", "parameters"]
    assert header_card(loaded.variant.checkpoint_path)["name"] == name


def test_weights_are_named_and_shaped_as_in_the_seed():
    shapes = {name: tuple(t.shape) for name, t in hand_set_state_dict(True).items()}
    assert shapes["layer1.object_head.query"] == (22, 2)  # Wq_O
    assert shapes["layer1.object_head.output"] == (2, 22)  # Wo_O
    assert shapes["layer1.previous_word_head.query"] == (22, 6)  # Wq_P
    assert shapes["layer1.previous_word_head.value"] == (22, 1)  # Wv_P
    assert shapes["layer2.flight_head.value"] == (22, 2)  # Wv_fly_head
    assert shapes["layer2.output"] == (4, 22)  # Wo_2
    assert (shapes["parity_ffn.W1"], shapes["parity_ffn.b1"], shapes["parity_ffn.W2"]) == ((22, 8), (8,), (8, 2))
    assert sum(t.numel() for t in hand_set_state_dict(True).values()) == 1300


def test_build_is_reproducible_and_matches_the_shipped_entries(puzzle_files):
    _, cards = puzzle_files
    entries = tomllib.loads((ROOT / "registry.toml").read_text(encoding="utf-8"))
    for card in cards:
        shipped = entries[card.name]
        assert shipped["checkpoint"]["sha256"] == card.checkpoint.sha256
        assert shipped["checkpoint"]["path"] == f"checkpoints/{card.name}.safetensors"
        assert shipped["recipe"]["kind"] == "hand-built"
        assert shipped["lineage"].startswith("seed 003_6bff11e00caeffbd: ")
        assert shipped["tokenizer"] == {"kind": "puzzle-words", "vocab_size": 10}
        assert sha256_file(ROOT / shipped["checkpoint"]["path"]) == card.checkpoint.sha256


# -- explanation and picture -----------------------------------------------------------


def test_explain_shows_named_slots_and_every_head(puzzle):
    text = puzzle.network.ask(puzzle.tokenizer, SEED_PAIR[0], explain=True)
    assert text.splitlines()[0] == "Human  [0.02, 1.00]"
    for expected in ("residual stream X:", "15 previous_word_is_disobey *", "19 is_attr_fly_disobeyed *",
                     "layer 1: object head", "layer 1: previous-word head", "layer 2: flight head",
                     "layer 2: speech head", "parity FFN output Y"):
        assert expected in text


def test_png_draws_the_attention_maps(puzzle, tmp_path):
    picture = tmp_path / "maps.png"
    text = puzzle.network.ask(puzzle.tokenizer, SEED_PAIR[0], png=picture)
    assert text.splitlines()[-1] == f"attention maps written to {picture}"
    assert picture.read_bytes().startswith(b"\x89PNG")


def test_png_without_matplotlib_says_how_to_install_it(puzzle, tmp_path, monkeypatch):
    # None in sys.modules makes `import matplotlib.figure` fail as if it were not installed
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ZooError, match=r"^drawing needs matplotlib: pip install 'zoo-lm\[plots\]'$"):
        puzzle.network.ask(puzzle.tokenizer, SEED_PAIR[0], png=tmp_path / "maps.png")


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("prompt, message", [
    ("Dog disobeys keep-flight he-is?", "unknown word 'Dog'; the puzzle's words are: " + ", ".join(VOCABULARY)),
    ("Crow disobeys keep-flight swap-speech", "the prompt must ask 'he-is?'"),
    ("", "the prompt must ask 'he-is?'"),
    ("Crow disobeys keep-flight disobeys swap-speech keep-speech he-is?", "the prompt has 7 words but the puzzle network has 6 positions"),
])
def test_bad_prompts_raise_one_clear_line(puzzle, prompt, message):
    with pytest.raises(ZooError) as error:
        puzzle.network.ask(puzzle.tokenizer, prompt)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_forward_refuses_too_many_tokens_and_targets(puzzle):
    with pytest.raises(ZooError, match="7 tokens exceed"):
        puzzle.network(torch.zeros(1, 7, dtype=torch.long))
    with pytest.raises(ZooError, match="no training loss"):
        puzzle.network(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))


@pytest.mark.parametrize("config, message", [
    ({"positions": True, "max_tokens": 6, "colour": "red"}, "unknown config key"),
    ({"max_tokens": 6, "context_length": 8}, "context_length 8 must equal max_tokens 6"),
    ({"vocab_size": 1024}, "vocab_size must be 10"),
    ({"positions": "yes"}, "positions must be true or false"),
    ({"positions": False, "slots": slot_names(True)}, "slot 9 is 'pos0', expected 'previous_word_is_disobey'"),
])
def test_bad_configs_are_refused(config, message):
    with pytest.raises(ZooError, match=message):
        build_puzzle(config, None)


def test_config_slots_name_the_layout():
    assert len(slot_names(True)) == 22 and len(slot_names(False)) == 16
    network = build_puzzle({"positions": True, "max_tokens": 6, "slots": slot_names(True), "context_length": 6, "vocab_size": 10})
    assert isinstance(network, PuzzleTransformer) and network.slots["question"] == 7


# -- the tokenizer -----------------------------------------------------------------------


def test_tokenizer_matches_two_word_tokens_greedily():
    tokenizer = PuzzleTokenizer()
    ids = tokenizer.encode("Flying superhero disobeys swap-flight he-is?")
    assert len(ids) == 4 and tokenizer.vocab_size == 10
    assert tokenizer.decode(ids) == "Flying superhero disobeys swap-flight he-is?"
    assert tokenizer.encode("flying  Superhero  he-is?") == tokenizer.encode("Flying superhero he-is?")
    assert tokenizer.encode("") == []


def test_tokenizer_refuses_half_a_word_and_bad_ids():
    tokenizer = PuzzleTokenizer()
    with pytest.raises(ZooError, match="unknown word 'Flying'"):
        tokenizer.encode("Flying crow he-is?")
    with pytest.raises(ZooError, match="outside the puzzle vocabulary"):
        tokenizer.decode([10])
