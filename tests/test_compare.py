"""`zoo compare` and `zoo attention`: same windows, same seeds, readable maps."""

from __future__ import annotations

import json

import pytest


def test_compare_json_is_repeatable_and_shares_windows(zoo):
    args = ("compare", "bigram", "transformer-1b-learned-ctx8", "--json", "--windows", "64", "--max-new-tokens", "12")
    first = zoo(*args)
    assert first.code == 0, first.err
    report = json.loads(first.out)
    assert zoo(*args).out == first.out  # same seed: same windows, losses and samples
    bigram, transformer = report["models"]
    assert report["context"] == 8 and report["windows"] == 64 and report["baseline"] == "bigram"
    assert bigram["train_delta"] == 0.0 and bigram["validation_delta"] == 0.0
    assert transformer["validation_delta"] == pytest.approx(transformer["validation_loss"] - bigram["validation_loss"])
    assert transformer["validation_delta"] < 0  # the shipped transformer beats the bigram on the same text
    assert bigram["sample"].startswith(report["prompt"]) and transformer["sample"].startswith(report["prompt"])
    other_seed = json.loads(zoo(*args[:-4], "--seed", "7", "--json", "--windows", "64", "--max-new-tokens", "12").out)
    assert other_seed["models"][0]["validation_loss"] != bigram["validation_loss"]


def test_compare_crops_to_the_shortest_context(zoo):
    report = json.loads(zoo("compare", "transformer-6b-sin", "bigram", "--json", "--windows", "16", "--max-new-tokens", "1").out)
    assert report["context"] == 8


def test_compare_writes_the_samples_side_by_side(zoo, tmp_path):
    out = tmp_path / "samples.png"
    result = zoo("compare", "bigram", "transformer-1b-learned-ctx8", "--windows", "8", "--max-new-tokens", "20", "--out", str(out))
    assert result.code == 0 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_text_shows_deltas_and_samples(zoo):
    result = zoo("compare", "bigram", "transformer-2b-learned-ctx8", "--windows", "32", "--prompt", "KING:", "--max-new-tokens", "5")
    assert result.code == 0
    assert "Δ validation" in result.out and "--- transformer-2b-learned-ctx8 ---\nKING:" in result.out


@pytest.mark.parametrize(
    "args, message",
    [
        (("bigram",), "compare needs at least two variants"),
        (("bigram", "puzzle-disobeys"), "answers questions rather than predicting text"),
        (("bigram", "bigram", "--windows", "0"), "--windows must be at least 1"),
    ],
)
def test_compare_refuses_what_it_cannot_compare(zoo, args, message):
    result = zoo("compare", *args)
    assert result.code == 1 and message in result.err and result.err.count("\n") == 1


def test_attention_png(zoo, tmp_path):
    out = tmp_path / "maps.png"
    result = zoo("attention", "transformer-2b-learned-ctx8", "--prompt", "ROMEO: O, she", "--out", str(out))
    assert result.code == 0, result.err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    assert "4 attention maps" in result.out


def test_attention_text_rows_sum_to_one(zoo):
    result = zoo("attention", "transformer-1b-learned-ctx8", "--prompt", "To be or")
    assert result.code == 0
    blocks = [b for b in result.out.strip().split("\n\n") if b]
    assert len(blocks) == 2  # one layer, two heads
    for block in blocks:
        for row in block.splitlines()[3:]:
            weights = [float(v) for v in row.split()[-3:]]
            assert sum(weights) == pytest.approx(1.0, abs=0.02)


def test_attention_refuses_prompts_longer_than_the_window(zoo):
    result = zoo("attention", "bigram", "--prompt", "x")
    assert result.code == 1 and "has no attention to show" in result.err
    long = zoo("attention", "transformer-1b-learned-ctx8", "--prompt", "one two three four five six seven eight nine")
    assert long.code == 1 and "attends over at most 8" in long.err


def test_compare_names_the_models_and_texts_it_cannot_score_together(zoo, tmp_path):
    verses = tmp_path / "verses.txt"
    verses.write_text(open("data/tinyshakespeare.txt").read()[:30000])
    trained = zoo("train", "bigram", "--steps", "2", "--publish", "--name", "my-bigram", "--data", str(verses), "--quiet")
    assert trained.code == 0, trained.err
    # different tokenizers (char and bpe) and different texts: not silently the first one's text, either order
    for names in (("gpt-char-mini", "my-bigram"), ("my-bigram", "gpt-char-mini")):
        refused = zoo("compare", *names, "--windows", "2", "--max-new-tokens", "1")
        assert refused.code == 1 and refused.err.count("\n") == 1, refused.err
        for fragment in ("'gpt-char-mini' ", "'my-bigram' ", "tinyshakespeare", str(verses), "--data NAME"):
            assert fragment in refused.err, refused.err
    # told which text: each is scored on it, and the report says which
    named = zoo("compare", "gpt-char-mini", "my-bigram", "--data", "tinyshakespeare", "--text-chars", "500",
                "--max-new-tokens", "1")
    assert named.code == 0 and "of the validation split of tinyshakespeare" in named.out, named.err
    report = json.loads(zoo("compare", "gpt-char-mini", "my-bigram", "--data", str(verses), "--text-chars", "500",
                            "--max-new-tokens", "1", "--json").out)
    assert report["dataset"] == str(verses) and report["unit"] == "bits per byte"
    # a text one model's vocabulary cannot spell: that model and that text are named
    foreign = tmp_path / "foreign.txt"
    foreign.write_text("Ωmega ünïcode " * 2000)
    refused = zoo("compare", "bigram", "gpt-char-mini", "--data", str(foreign), "--max-new-tokens", "1")
    assert refused.code == 1 and f"'gpt-char-mini' cannot be scored on {foreign}: " in refused.err, refused.err
