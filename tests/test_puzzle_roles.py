"""The puzzle's explanation proved by intervention: each head role, checked by ablating that head."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import zoo_core
from zoo_plugins.puzzle.roles import ROLES, format_role_report, verify_roles
from zoo_plugins.puzzle.rule import well_formed_sentences


@pytest.fixture(scope="module")
def puzzle():
    return zoo_core.load("puzzle-disobeys")


@pytest.fixture(scope="module")
def nopos():
    return zoo_core.load("puzzle-disobeys-nopos")


def test_each_head_has_hook_points_named_after_its_role(puzzle, nopos):
    points = puzzle.hook_points()
    for head in ("layer1.object_head", "layer1.previous_word_head", "layer2.flight_head", "layer2.speech_head"):
        assert f"{head}.pattern" in points and f"{head}.result" in points
    assert {"embed", "layer1.resid_post", "layer2.resid_post", "parity_ffn.hidden", "output"} <= set(points)
    assert "layer1.previous_word_head.result" not in nopos.hook_points()
    # A hook that hands back its input changes nothing, bit for bit.
    prompt = "Crow disobeys keep-flight swap-speech he-is?"
    plain, cache = puzzle.run_with_cache(prompt)
    with puzzle.hooks({"*": lambda activation, name: activation.clone()}):
        same, _ = puzzle.run_with_cache(prompt)
    assert torch.equal(plain, same)
    assert torch.equal(cache["output"], plain)


def test_the_predictions_come_from_the_roles_and_the_rule_alone():
    """Without any network: the previous-word head's ablation changes exactly the
    sentences that contain 'disobeys'; the object head's, those whose object is not a Rock."""
    by_head = {role.head: role for role in ROLES}
    for words in well_formed_sentences(6):
        assert by_head["previous_word"].predicts_change(words) == ("disobeys" in words)
        assert by_head["object"].predicts_change(words) == (words[0] != "Rock")


def test_every_role_of_the_explanation_holds_on_puzzle_disobeys(puzzle):
    report = puzzle.network.verify_roles(puzzle.tokenizer)
    assert report["holds"] and report["sentences"] == report["answers_as_rule"] == 128
    rows = {entry["head"]: entry for entry in report["roles"]}
    assert [rows[h]["predicted_to_change"] for h in ("object", "previous_word", "flight", "speech")] == [96, 96, 64, 64]
    for entry in rows.values():
        assert entry["verdict"] == "holds"
        assert entry["changed_as_predicted"] == entry["predicted_to_change"]
        assert entry["unchanged_as_predicted"] == 128 - entry["predicted_to_change"]
        assert entry["answers_as_role_reading"] == 128
    text = "\n".join(format_role_report(report, "puzzle-disobeys"))
    assert "every role holds" in text and "layer 1: previous-word head" in text


def test_a_wrong_explanation_fails(puzzle):
    """The checker can fail: the flight and speech heads' roles swapped, and the
    previous-word role given to the object head."""
    by_head = {role.head: role for role in ROLES}
    swapped = [
        dataclasses.replace(by_head["flight"], hook=by_head["speech"].hook),
        dataclasses.replace(by_head["speech"], hook=by_head["flight"].hook),
        dataclasses.replace(by_head["previous_word"], hook=by_head["object"].hook),
    ]
    report = verify_roles(puzzle.network, puzzle.tokenizer, swapped)
    assert not report["holds"]
    assert [entry["verdict"] for entry in report["roles"]] == ["fails", "fails", "fails"]
    assert all(entry["mismatches_total"] > 0 and entry["mismatches"] for entry in report["roles"])
    assert "not every role holds" in "\n".join(format_role_report(report))


def test_without_positions_the_report_says_what_breaks(nopos):
    report = nopos.network.verify_roles(nopos.tokenizer)
    verdicts = {entry["head"]: entry["verdict"] for entry in report["roles"]}
    # The previous-word head is gone; the layer-2 heads no longer carry "disobeyed";
    # the object head still does exactly its job.
    assert verdicts == {"object": "holds", "previous_word": "absent", "flight": "fails", "speech": "fails"}
    assert not report["holds"] and report["answers_as_rule"] == 32
    text = "\n".join(format_role_report(report, "puzzle-disobeys-nopos"))
    assert "absent: layer 1: previous-word head" in text


def test_zoo_inspect_verify_roles(zoo):
    import json

    done = zoo("inspect", "puzzle-disobeys", "--verify-roles", "--json")
    assert done.code == 0, done.err
    report = json.loads(done.out)
    assert report["name"] == "puzzle-disobeys" and report["roles"]["holds"]
    assert [entry["verdict"] for entry in report["roles"]["roles"]] == ["holds"] * 4
    # Without positions the check fails, as a failing test does, and the table says what broke.
    done = zoo("inspect", "puzzle-disobeys-nopos", "--verify-roles")
    assert done.code == 1
    assert "layer 1: previous-word head" in done.out and "absent" in done.out
    assert "not every role holds" in done.out
    # A network with no stated roles: one line.
    done = zoo("inspect", "bigram", "--verify-roles")
    assert done.code != 0 and "states no head roles" in done.err and len(done.err.strip().splitlines()) == 1


def test_docs_inspect_md_shows_what_the_nopos_check_prints(zoo):
    """The page runs the puzzle-disobeys command itself (tests/test_inspect.py); the
    no-position report, which exits 1, is shown as a text block checked here."""
    from .conftest import ROOT

    text = (ROOT / "docs" / "inspect.md").read_text(encoding="utf-8")
    section = text.split("## The puzzle, proved by intervention\n", 1)[1].split("\n## ", 1)[0]
    shown = section.split("status 1, as a failing test does, and prints:\n\n```text\n", 1)[1].split("```", 1)[0]
    done = zoo("inspect", "puzzle-disobeys-nopos", "--verify-roles")
    assert done.code == 1 and done.out.rstrip() == shown.rstrip()


def test_zoo_inspect_ablate_on_the_puzzle_counts_changed_answers(puzzle, nopos, zoo):
    """`--ablate LAYER.HEAD` on the puzzle: the answers that change, as many as each role predicts,
    heads counted as attention_maps orders them; a head that is not there is one line."""
    done = zoo("inspect", "puzzle-disobeys", "--ablate", "each", "--json")
    assert done.code == 0, done.err
    report = json.loads(done.out)["answer_ablation"]
    predicted = {entry["title"]: entry["predicted_to_change"] for entry in verify_roles(puzzle.network, puzzle.tokenizer)["roles"]}
    assert [a["heads"] for a in report["ablations"]] == [["0.0"], ["0.1"], ["1.0"], ["1.1"]]
    assert {a["titles"][0]: a["changed"] for a in report["ablations"]} == predicted
    # Heads of one group are zeroed together.
    both = nopos.network.ablate_answers(nopos.tokenizer, [[(1, 0), (1, 1)]])["ablations"][0]
    assert both["titles"] == ["layer 2: flight head", "layer 2: speech head"] and both["changed"] > 0
    for arguments, message in (
        (("--ablate", "0.1"), "no head 0.1 in this puzzle network"),  # nopos has no previous-word head
        (("--ablate", "0.0", "--ablation", "mean"), "zeroing heads only"),
    ):
        done = zoo("inspect", "puzzle-disobeys-nopos", *arguments)
        assert done.code != 0 and message in done.err and len(done.err.strip().splitlines()) == 1
