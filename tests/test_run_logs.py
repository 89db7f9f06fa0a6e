"""Live run logs: the jsonl log beside every run, and on request CSV, TensorBoard
and MLflow, each read back by the tool's own reader."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from zoo_core.cli import build_parser
from zoo_core.cli.training import _worker_arguments, training_job
from zoo_core.storage.checkpoints import sha256_file

from .conftest import ROOT

GPT = "gpt-char-mini"
SMALL = "transformer-1b-learned-ctx8"
ZOO = Path(sys.executable).parent / "zoo"
STEPS = 6


def _installed(*modules: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(module) is not None for module in modules)


# Installed by the Makefile's test environment (the tensorboard and mlflow extras).
needs_libraries = pytest.mark.skipif(
    not _installed("tensorboard", "mlflow", "sqlalchemy", "alembic"),
    reason="needs the tensorboard and mlflow extras: pip install 'zoo-lm[tensorboard,mlflow]'",
)


def _lines(path: Path) -> list[dict]:
    """The complete lines of a jsonl log, each parsed: what a reader sees at any moment."""
    data = path.read_bytes() if path.exists() else b""
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].decode("utf-8").splitlines()]


def _environment() -> dict[str, str]:
    # The subprocess sees the same catalogue as this one, and trains on one thread as the machine allows.
    kept = {key: value for key, value in os.environ.items() if key not in ("ZOO_REGISTRY", "ZOO_BUILTIN_REGISTRY")}
    return {**kept, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def small_text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "shakespeare-30k.txt"
    path.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    return path


@contextlib.contextmanager
def _one_thread():
    """On a small shared machine, torch's threads wait on each other more than they
    compute for models this small: one thread trains them fastest."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def one_thread():
    with _one_thread():
        yield


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One short run logged everywhere, at the default places beside it."""
    from zoo_core import cli

    out = tmp_path_factory.mktemp("run")
    args = ["train", GPT, "--steps", str(STEPS), "--set", "eval_windows=16", "--out", str(out), "--quiet"]
    with _one_thread():
        assert cli.main([*args, "--log-to", "tensorboard", "--log-to", "mlflow", "--log-to", "csv"]) == 0
    return out


@needs_libraries
def test_the_jsonl_log_describes_the_run_its_steps_and_how_it_ended(trained):
    lines = _lines(trained / f"{GPT}.log.jsonl")
    first, last = lines[0], lines[-1]
    assert first["kind"] == "run" and first["variant"] == GPT and first["dataset"] == "tinyshakespeare"
    assert first["recipe"]["steps"] == STEPS and first["recipe"]["eval_windows"] == 16 and first["started"]
    steps = [line for line in lines if line["kind"] == "step"]
    evaluations = [line for line in lines if line["kind"] == "evaluation"]
    assert [line["step"] for line in steps] == list(range(1, STEPS + 1))
    assert all(set(line) == {"step", "kind", "loss", "learning_rate", "tokens_per_second", "grad_norm", "time"} for line in steps)
    assert all(line["loss"] > 0 and line["grad_norm"] > 0 and line["tokens_per_second"] > 0 for line in steps)
    assert [(line["step"], line["windows"]) for line in evaluations] == [(1, 16), (STEPS, 16)]
    history = json.loads((trained / f"{GPT}.history.json").read_text())["history"]
    assert [(line["train"], line["validation"]) for line in evaluations] == [(h["train"], h["validation"]) for h in history]
    assert last["kind"] == "end" and last["status"] == "finished" and last["step"] == STEPS
    assert last["checkpoint"] == str(trained / f"{GPT}.safetensors")
    assert last["sha256"] == sha256_file(trained / f"{GPT}.safetensors")
    assert last["validation_loss"] == round(history[-1]["validation"], 4)
    times = [line["time"] for line in lines]
    assert times == sorted(times)


@needs_libraries
def test_tensorboard_reads_back_the_loss_curve(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logged = [line for line in _lines(trained / f"{GPT}.log.jsonl") if line["kind"] == "step"]
    (run,) = (trained / "tensorboard").iterdir()
    assert run.name.startswith(f"{GPT}-") and run.name == _lines(trained / f"{GPT}.log.jsonl")[0]["run"]
    events = EventAccumulator(str(run))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"train/loss", "train/learning_rate", "train/tokens_per_second", "train/grad_norm"} <= scalars
    assert {"eval/train", "eval/validation"} <= scalars
    loss = events.Scalars("train/loss")
    assert [point.step for point in loss] == list(range(1, STEPS + 1))
    assert [point.value for point in loss] == pytest.approx([line["loss"] for line in logged], rel=1e-6)
    assert [point.step for point in events.Scalars("eval/validation")] == [1, STEPS]
    assert any(tag.startswith("recipe") for tag in events.Tags()["tensors"])  # the recipe, as text


@needs_libraries
def test_mlflow_reads_back_the_loss_curve_tags_params_and_artifacts(trained):
    from mlflow.tracking import MlflowClient

    header = _lines(trained / f"{GPT}.log.jsonl")[0]
    uri = f"sqlite:///{trained / 'mlflow' / 'mlflow.db'}"
    assert header["logs"]["mlflow"] == uri
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(header["logs"]["mlflow_run_id"])
    assert client.get_experiment(run.info.experiment_id).name == GPT
    assert run.info.status == "FINISHED" and run.info.run_name == header["run"]
    assert run.data.tags["variant"] == GPT and run.data.tags["dataset"] == "tinyshakespeare"
    assert run.data.params["steps"] == str(STEPS) and run.data.params["learning_rate"] == "0.001"
    logged = [line for line in _lines(trained / f"{GPT}.log.jsonl") if line["kind"] == "step"]
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert sorted(point.step for point in history) == list(range(1, STEPS + 1))
    assert [point.value for point in sorted(history, key=lambda p: p.step)] == pytest.approx([line["loss"] for line in logged])
    assert [point.step for point in client.get_metric_history(run.info.run_id, "eval/validation")] == [1, STEPS]
    assert run.data.metrics["validation_loss"] == _lines(trained / f"{GPT}.log.jsonl")[-1]["validation_loss"]
    artifacts = {artifact.path for artifact in client.list_artifacts(run.info.run_id)}
    assert artifacts == {f"{GPT}.history.json", "card.json"}  # the weights are in --out already
    card = json.loads(Path(client.download_artifacts(run.info.run_id, "card.json", str(trained))).read_text())
    assert card["name"] == GPT and card["recipe"]["steps"] == STEPS


@needs_libraries
def test_a_published_fine_tune_logs_beside_the_catalogue_and_says_where(zoo, private_home, one_thread):
    """`--from` publishes into $ZOO_HOME: the logs go to $ZOO_HOME/runs/NAME/, never
    among the weights in checkpoints/, and the run names that folder when it starts
    (stderr) and ends (stdout), piped as here; the readers find the logs there."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = zoo("train", "my-bigram", "--from", "bigram", "--steps", "3", "--set", "eval_windows=16",
                 "--log-to", "tensorboard", "--log-to", "mlflow", "--log-checkpoints")
    assert result.code == 0, result.err
    started = [line for line in result.err.splitlines() if line.startswith("my-bigram: logs in ")]
    ended = [line for line in result.out.splitlines() if line.startswith("  logs in ")]
    assert len(started) == 1 and len(ended) == 1, (result.err, result.out)
    folder = Path(started[0].split("logs in ", 1)[1].split(": ", 1)[0])
    assert folder == private_home / "runs" / "my-bigram"
    assert ended[0].strip() == started[0].removeprefix("my-bigram: ")  # the same places, said twice
    assert "tensorboard/my-bigram-" in ended[0] and "mlflow/mlflow.db (run " in ended[0]
    assert sorted(path.name for path in (private_home / "checkpoints").iterdir()) == [
        "bpe-1024.tiktoken", "my-bigram.history.json", "my-bigram.safetensors"]

    header = _lines(folder / "my-bigram.log.jsonl")[0]
    (run_folder,) = (folder / "tensorboard").iterdir()
    assert [point.step for point in EventAccumulator(str(run_folder)).Reload().Scalars("train/loss")] == [1, 2, 3]
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow' / 'mlflow.db'}")
    run = client.get_run(header["logs"]["mlflow_run_id"])
    assert header["logs"]["mlflow_run_id"] in ended[0] and run.data.tags["base"] == "bigram"
    assert [point.step for point in client.get_metric_history(run.info.run_id, "train/loss")] == [1, 2, 3]
    # --log-checkpoints: the weights too, besides the card and the history.
    artifacts = {artifact.path for artifact in client.list_artifacts(run.info.run_id)}
    assert artifacts == {"my-bigram.safetensors", "my-bigram.history.json", "card.json"}


def test_log_checkpoints_without_mlflow_is_one_line(zoo):
    result = zoo("train", "my-bigram", "--from", "bigram", "--steps", "1", "--log-checkpoints")
    assert result.code == 1 and result.err.strip() == (
        "zoo: error: --log-checkpoints keeps the weights in the MLflow run: add --log-to mlflow")


@needs_libraries
def test_the_csv_log_has_a_row_per_step_and_evaluation(trained):
    with (trained / f"{GPT}.log.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(row["kind"], int(row["step"])) for row in rows if row["kind"] == "step"] == [
        ("step", step) for step in range(1, STEPS + 1)
    ]
    evaluations = [row for row in rows if row["kind"] == "evaluation"]
    assert [int(row["step"]) for row in evaluations] == [1, STEPS] and all(row["validation"] for row in evaluations)
    assert all(float(row["loss"]) > 0 for row in rows if row["kind"] == "step")


def test_a_second_process_sees_the_jsonl_log_grow_during_the_run(tmp_path, small_text):
    out = tmp_path / "out"
    log = out / f"{SMALL}.log.jsonl"
    # Far more steps than the test waits for, and no evaluation after the first:
    # what it sees grow is the timed flush. It stops the run itself, with Ctrl-C.
    command = [str(ZOO), "train", SMALL, "--steps", "1000000", "--set", "eval_every=1000000", "--set", "eval_windows=16",
               "--data", str(small_text), "--out", str(out), "--quiet"]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_environment())
    try:
        seen: list[int] = []  # the line counts read while the run went on
        deadline = time.monotonic() + 180
        while len(set(seen)) < 3:
            count = len(_lines(log))  # every complete line parses
            assert run.poll() is None, run.communicate()
            if count:
                seen.append(count)
            assert time.monotonic() < deadline, f"the log did not grow: {seen}"
            time.sleep(0.05)
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert seen == sorted(seen)
    lines = _lines(log)
    assert log.read_bytes().endswith(b"\n")
    steps = [line["step"] for line in lines if line["kind"] == "step"]
    assert steps == list(range(1, len(steps) + 1))
    # The interrupted run's log stays readable and says so.
    assert lines[-1]["kind"] == "end" and lines[-1]["status"] == "interrupted" and lines[-1]["step"] == steps[-1]


@needs_libraries
def test_a_resumed_run_appends_to_its_logs(zoo, tmp_path, small_text, one_thread):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, steps = tmp_path / "out", 60
    args = ["train", SMALL, "--steps", str(steps), "--checkpoint-every", "10", "--set", "eval_every=10",
            "--set", "eval_windows=16", "--set", "batch_size=8", "--data", str(small_text), "--out", str(out), "--quiet",
            "--log-to", "csv", "--log-to", "tensorboard"]
    state = out / f"{SMALL}.state.safetensors"
    victim = subprocess.Popen([str(ZOO), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_environment())
    deadline = time.monotonic() + 180
    while not state.exists():
        assert victim.poll() is None, victim.communicate()
        assert time.monotonic() < deadline, "no training state appeared"
        time.sleep(0.002)
    victim.kill()  # no chance to close its logs: they end mid-run
    victim.communicate(timeout=60)
    assert not (out / f"{SMALL}.safetensors").exists(), "the run finished before it could be killed"
    before = _lines(out / f"{SMALL}.log.jsonl")

    resumed = zoo(*args, "--resume")
    assert resumed.code == 0, resumed.err
    lines = _lines(out / f"{SMALL}.log.jsonl")
    assert lines[: len(before)] == before and [line["kind"] for line in lines].count("run") == 1
    (mark,) = [index for index, line in enumerate(lines) if line["kind"] == "resumed"]
    saved = lines[mark]["step"]
    assert saved % 10 == 0 and saved < steps
    after = [line["step"] for line in lines[mark:] if line["kind"] == "step"]
    assert after == list(range(saved + 1, steps + 1))
    assert lines[-1]["kind"] == "end" and lines[-1]["status"] == "finished"

    with (out / f"{SMALL}.log.csv").open(newline="") as file:
        rows = list(csv.reader(file))
    assert [row[0] for row in rows].count("step") == 1  # one header, then appended rows
    assert int(rows[-1][0]) == steps

    # TensorBoard: a second event file in the same run's folder, hiding what the
    # killed run logged after its saved state; every step is there once.
    (run,) = (out / "tensorboard").iterdir()
    assert len(list(run.glob("events.out.tfevents.*"))) == 2
    events = EventAccumulator(str(run))
    events.Reload()
    assert [point.step for point in events.Scalars("train/loss")] == list(range(1, steps + 1))


@needs_libraries
def test_an_experiment_logs_each_arm_and_seed_tagged_with_study_and_seed(zoo, tmp_path, trained, one_thread):
    from mlflow.tracking import MlflowClient

    store = trained / "mlflow"  # a store made already: a new one builds its tables, which takes a while
    result = zoo("experiment", "--arms", SMALL, "bigram", "--steps", "4", "--seeds", "1", "2", "--eval-every", "2",
                 "--eval-targets", "16", "--milestones", "4", "--out", str(tmp_path), "--quiet",
                 "--log-to", f"mlflow={store}", "--log-to", "tensorboard")
    assert result.code == 0, result.err
    expected = {(arm, seed) for arm in (SMALL, "bigram") for seed in (1, 2)}
    headers = {}
    for arm, seed in expected:
        lines = _lines(tmp_path / "logs" / f"{arm}-seed{seed}.log.jsonl")
        headers[arm, seed] = lines[0]
        assert (lines[0]["study"], lines[0]["seed"], lines[0]["arm"]) == ("custom", seed, arm)
        assert [line["step"] for line in lines if line["kind"] == "step"] == [1, 2, 3, 4]
        assert [line["step"] for line in lines if line["kind"] == "evaluation"] == [1, 2, 4]
        assert lines[-1]["kind"] == "end" and lines[-1]["checkpoint"].endswith(f"{arm}-seed{seed}-step4.safetensors")
    assert len(list((tmp_path / "logs" / "tensorboard").iterdir())) == 4

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("custom")
    runs = client.search_runs([experiment.experiment_id])
    assert {(run.data.tags["arm"], int(run.data.tags["seed"])) for run in runs} == expected
    assert all(run.data.tags["study"] == "custom" for run in runs)
    for (arm, seed), header in headers.items():
        history = client.get_metric_history(header["logs"]["mlflow_run_id"], "eval/validation")
        assert [point.step for point in history] == [1, 2, 4]


def test_step_values_are_read_in_batches_and_written_as_strict_json(tmp_path, monkeypatch):
    from zoo_core.training import run_log

    monkeypatch.setattr(run_log, "FLUSH_SECONDS", math.inf)  # only the step count and evaluations flush
    path = tmp_path / "run.log.jsonl"
    with run_log.open_run_log([], tmp_path, "run", run_log.RunDescription("run", "study", tags={"seed": 1})) as log:
        for step in range(1, 4):
            log.log_step(step, {"loss": torch.tensor(float(step)), "learning_rate": 0.1, "grad_norm": torch.tensor(math.inf)})
        assert [line["kind"] for line in _lines(path)] == ["run"]  # the tensors are not read yet
        log.log_evaluation(3, {"train": 1.5, "validation": math.nan, "windows": 4})
    lines = _lines(path)
    assert [line["kind"] for line in lines] == ["run", "step", "step", "step", "evaluation", "end"]
    assert [line["loss"] for line in lines[1:4]] == [1.0, 2.0, 3.0]
    assert all(line["grad_norm"] is None for line in lines[1:4]) and lines[4]["validation"] is None
    assert lines[-1] | {"time": 0} == {"step": 3, "kind": "end", "status": "finished", "time": 0}
    assert path.read_text().count("NaN") == path.read_text().count("Infinity") == 0


def test_an_unknown_kind_of_log_is_one_line(zoo, tmp_path):
    for command in (["train", GPT], ["experiment", "--arms", SMALL]):
        result = zoo(*command, "--steps", "1", "--out", str(tmp_path / "out"), "--log-to", "wandb")
        assert result.code == 1
        assert result.err.splitlines() == [
            "zoo: error: --log-to wandb: unknown kind of log; the kinds are jsonl, csv, tensorboard, mlflow "
            "(KIND, or KIND=FOLDER)"
        ]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind, module", [("tensorboard", "tensorboard"), ("mlflow", "mlflow"), ("mlflow", "sqlalchemy")])
def test_a_missing_library_is_one_line_before_training(zoo, tmp_path, monkeypatch, kind, module):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    for command in (["train", GPT], ["experiment", "--arms", SMALL]):
        result = zoo(*command, "--steps", "1", "--out", str(tmp_path / "out"), "--log-to", kind)
        assert result.code == 1
        extra = "tensorboard" if kind == "tensorboard" else "mlflow"
        assert result.err.splitlines() == [
            f"zoo: error: --log-to {kind}: needs the {module} package, which is not installed; "
            f"pip install 'zoo-lm[{extra}]'"
        ]
    assert not (tmp_path / "out").exists()


def test_data_parallel_workers_are_handed_every_log(tmp_path):
    parser = build_parser("train")
    args = parser.parse_args(["train", GPT, "--log-to", "csv", "--log-to", f"tensorboard={tmp_path}"])
    args.argv = []
    job = training_job(args)
    worker = _worker_arguments(job, args)
    assert worker[worker.index("--log-to"):][:4] == ["--log-to", "csv", "--log-to", f"tensorboard={tmp_path}"]
    again = build_parser("train").parse_args(["train", *worker])
    assert training_job(again).log_to == job.log_to == ("csv", f"tensorboard={tmp_path}")
