"""`zoo experiment`: paired seeds, shared starting values, identical batches, results on disk."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import zoo_core
from zoo_core.training.studies import _share_initial_values
from zoo_core.training.study_table import t_975

ROOT = Path(__file__).resolve().parent.parent


def test_shared_components_start_equal_but_stay_separate():
    torch.manual_seed(0)
    bigram = zoo_core.build_network(zoo_core.get_variant("bigram"))
    torch.manual_seed(1)
    one = zoo_core.build_network(zoo_core.get_variant("transformer-1b-learned-ctx8"))
    torch.manual_seed(2)
    two = zoo_core.build_network(zoo_core.get_variant("transformer-2b-learned-ctx8"))
    _share_initial_values([bigram, one, two])
    assert torch.equal(bigram.token_embedding.weight, two.token_embedding.weight)
    assert torch.equal(one.blocks[0].attention.qkv.weight, two.blocks[0].attention.qkv.weight)
    assert bigram.token_embedding.weight is not two.token_embedding.weight
    with torch.no_grad():
        two.token_embedding.weight.add_(1.0)
    assert not torch.equal(bigram.token_embedding.weight, two.token_embedding.weight)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    from zoo_core import cli

    args = ["experiment", "--arms", "bigram", "transformer-1b-learned-ctx8", "transformer-1b-learned-post-ctx8",
            "--steps", "30", "--seeds", "42", "43", "--milestones", "10", "30", "--eval-every", "10",
            "--eval-targets", "64", "--out", str(out), "--quiet"]
    assert cli.main(args) == 0
    return out, args


def test_results_json_holds_config_runs_and_source_hash(study):
    out, _ = study
    report = json.loads((out / "results.json").read_text())
    assert report["config"]["seeds"] == [42, 43] and report["config"]["tokens_per_update"] == 256
    assert len(report["source_sha256"]) == 64
    assert [(r["arm"], r["seed"]) for r in report["runs"]] == [
        (arm, seed) for seed in (42, 43) for arm in ("bigram", "transformer-1b-learned-ctx8", "transformer-1b-learned-post-ctx8")
    ]
    for run in report["runs"]:
        assert [h["step"] for h in run["history"]] == [1, 10, 20, 30]
        assert run["parameters"] > 0 and run["update_seconds"] > 0
        assert set(run["samples"]) == {"10", "30"}
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG" and (out / "samples.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "checkpoints" / "transformer-1b-learned-ctx8-seed43-step30.safetensors").exists()


def test_arms_start_from_shared_values_per_seed(study):
    out, _ = study
    report = json.loads((out / "results.json").read_text())
    for seed in (42, 43):
        first_losses = [r["history"][0]["validation"] for r in report["runs"] if r["seed"] == seed]
        # Shared embedding and head: after one identical update the two one-block arms differ only by norm placement.
        assert abs(first_losses[1] - first_losses[2]) < 0.2
    bigram = load_file(str(out / "checkpoints" / "bigram-seed42-step10.safetensors"))
    block = load_file(str(out / "checkpoints" / "transformer-1b-learned-ctx8-seed42-step10.safetensors"))
    assert bigram["token_embedding.weight"].shape == block["token_embedding.weight"].shape


def test_the_same_command_gives_the_same_numbers(study, tmp_path):
    out, args = study
    from zoo_core import cli

    again = tmp_path / "again"
    assert cli.main([*args[:-3], "--out", str(again), "--quiet"]) == 0
    first = json.loads((out / "results.json").read_text())["runs"]
    second = json.loads((again / "results.json").read_text())["runs"]
    assert [r["history"] for r in first] == [r["history"] for r in second]
    assert [r["samples"] for r in first] == [r["samples"] for r in second]


def test_cross_evaluation_scores_every_shorter_context(zoo, tmp_path):
    result = zoo("experiment", "--arms", "transformer-1b-learned-ctx8", "transformer-4b-learned", "--steps", "5",
                 "--seeds", "1", "--eval-every", "5", "--eval-targets", "32", "--cross-evaluate", "--out", str(tmp_path), "--quiet")
    assert result.code == 0, result.err
    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert set(runs[0]["cross_evaluation"]) == {"8"}
    assert set(runs[1]["cross_evaluation"]) == {"8", "32"}


def test_a_short_study_still_draws_a_curve(zoo, tmp_path):
    data = tmp_path / "small.txt"
    data.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text()[:40_000])
    result = zoo("experiment", "--arms", "transformer-1b-learned-ctx8", "--steps", "40", "--seeds", "1",
                 "--eval-targets", "32", "--data", str(data), "--out", str(tmp_path / "out"), "--quiet")
    assert result.code == 0, result.err
    run = json.loads((tmp_path / "out" / "results.json").read_text())["runs"][0]
    assert [h["step"] for h in run["history"]] == [1, *range(2, 41, 2)]  # 21 points, not 2


@pytest.mark.parametrize("args, message", [
    (["no-such-study"], "unknown study 'no-such-study'"),
    (["depth-1-2", "--arms", "bigram"], "not both"),
    (["--arms", "bigram", "puzzle-disobeys"], "hand-built"),
    (["--arms", "bigram@x"], "context after '@' must be a positive number"),
    (["--arms", "bigram", "--table", "t.csv"], "--table needs the validation text scored"),
])
def test_bad_studies_are_one_line(zoo, args, message):
    result = zoo("experiment", *args, "--steps", "1")
    assert result.code == 1 and message in result.err and result.err.count("\n") == 1


@pytest.mark.slow
def test_a_seed_000_study_runs_end_to_end(zoo, tmp_path):
    result = zoo("experiment", "depth-1-2", "--steps", "200", "--eval-every", "100", "--out", str(tmp_path), "--quiet")
    assert result.code == 0, result.err
    report = json.loads((tmp_path / "results.json").read_text())
    assert len(report["runs"]) == 9 and (tmp_path / "loss.png").exists()
    finals = {run["arm"]: run["history"][-1]["validation"] for run in report["runs"] if run["seed"] == 42}
    assert finals["transformer-1b-learned-ctx8"] < finals["bigram"]


def test_seeds_in_parallel_processes_give_the_sequential_results(study, tmp_path):
    out, args = study
    from zoo_core import cli

    parallel = tmp_path / "parallel"
    assert cli.main([*args[:-3], "--out", str(parallel), "--quiet", "--jobs", "2"]) == 0

    def without_timings(path):
        report = json.loads((path / "results.json").read_text())
        for run in report["runs"]:
            assert run.pop("update_seconds") > 0 and run.pop("cpu_seconds") > 0
        return report

    # Equal to the bit: each worker process takes this process's thread count
    # (studies._seed_job), on the same machine and torch (docs/determinism.md).
    assert without_timings(parallel) == without_timings(out)
    for name in ("transformer-1b-learned-ctx8-seed43-step30", "bigram-seed42-step10"):
        assert (parallel / "checkpoints" / f"{name}.safetensors").read_bytes() == (out / "checkpoints" / f"{name}.safetensors").read_bytes()


def test_jobs_must_be_positive(zoo):
    result = zoo("experiment", "depth-1-2", "--jobs", "0", "--steps", "1")
    assert result.code == 1 and result.err.strip() == "zoo: error: --jobs must be at least 1, not 0"


def test_a_study_has_one_progress_display_named_after_it(zoo, tmp_path):
    data = tmp_path / "small.txt"
    data.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text()[:40_000])
    result = zoo("experiment", "--arms", "bigram", "--steps", "20", "--seeds", "1", "2",
                 "--eval-targets", "32", "--data", str(data), "--out", str(tmp_path / "out"))
    assert result.code == 0, result.err
    lines = result.err.splitlines()
    assert all(line.startswith("experiment custom: ") for line in lines), lines  # an ad-hoc study is 'custom'
    steps = [line for line in lines if ": step " in line]
    assert 15 <= len(steps) <= 25 and steps[-1].startswith("experiment custom: step 40/40"), steps  # both seeds
    assert all("ETA …" not in line for line in steps[1:]), steps  # an estimate from the second line on
    assert [line for line in lines if ": seed " in line] == ["experiment custom: seed 1 (1 of 2)",
                                                             "experiment custom: seed 2 (2 of 2)"]


def test_the_families_study_writes_its_table(zoo, tmp_path):
    """A tiny run of the families study's command (docs/families.md): the four layouts,
    paired seeds, each scored over the whole validation text, one CSV row per layout."""
    data = tmp_path / "small.txt"
    data.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text()[:20_000])
    table = tmp_path / "results" / "families.csv"
    result = zoo("experiment", "families", "--steps", "2", "--seeds", "1", "2", "--data", str(data),
                 "--out", str(tmp_path / "out"), "--table", str(table), "--quiet")
    assert result.code == 0, result.err
    with table.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["variant", "parameters", "seeds", "steps", "tokens", "bits_per_byte", "bits_per_byte_ci95",
                             "bits_per_byte_delta", "bits_per_byte_delta_ci95", "bits_per_character",
                             "train_cpu_seconds", "tokens_per_cpu_second", "train_seconds", "tokens_per_second"]
    assert [row["variant"] for row in rows] == ["gpt-char-mini", "llama-char-mini", "neox-char-mini", "mistral-char-mini"]
    assert [int(row["parameters"]) for row in rows] == [816_193, 804_224, 809_984, 804_224]
    for row in rows:
        assert (row["seeds"], row["steps"], row["tokens"]) == ("2", "2", str(2 * 768))
        assert 1 < float(row["bits_per_byte"]) < 8 and float(row["bits_per_byte_ci95"]) >= 0
        assert row["bits_per_character"] == row["bits_per_byte"]  # Shakespeare is ASCII
        assert float(row["train_cpu_seconds"]) > 0 and float(row["tokens_per_second"]) > 0
    assert rows[0]["bits_per_byte_delta"] == "0.0000" and rows[0]["bits_per_byte_delta_ci95"] == ""
    assert all(float(row["bits_per_byte_delta_ci95"]) >= 0 for row in rows[1:])
    assert (tmp_path / "out" / "results.csv").read_text() == table.read_text()
    assert "95% t intervals over seeds" in result.out

    # The GPT arm run on alone (docs/families.md, at equal CPU time) repeats the
    # study's GPT arm exactly for the updates they share, so the two pair by seed.
    result = zoo("experiment", "families-gpt-at-equal-cpu", "--steps", "3", "--seeds", "1", "2", "--eval-every", "1",
                 "--data", str(data), "--out", str(tmp_path / "on"), "--table", str(tmp_path / "on.csv"), "--quiet")
    assert result.code == 0, result.err
    study = {(run["arm"], run["seed"]): run for run in json.loads((tmp_path / "out" / "results.json").read_text())["runs"]}
    for run in json.loads((tmp_path / "on" / "results.json").read_text())["runs"]:
        assert run["history"][1] == study[("gpt-char-mini", run["seed"])]["history"][-1]  # both at step 2
    assert (tmp_path / "on.csv").read_text().splitlines()[1].startswith("gpt-char-mini,816193,2,3,")


def test_t_quantiles_match_the_tables():
    assert t_975(2) == 4.303  # three paired seeds
    for freedom, quantile in ((11, 2.201), (20, 2.086), (30, 2.042), (120, 1.980)):
        assert t_975(freedom) == pytest.approx(quantile, abs=0.0005)
