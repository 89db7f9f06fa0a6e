"""Data-parallel training through torchrun: two processes end where one process ends.

Every process draws the one-process run's windows and keeps its share; DDP
averages the gradients, so the weights agree to float rounding. The slow tests
kill one process (the run stops with one line, the saved state intact), resume a
run on another number of processes, and rendezvous two "machines" on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from zoo_core.catalogue.registry import read_registry_file
from zoo_core.corpus.batches import Corpus
from zoo_core.training.state import STATE_KEY

from .conftest import ROOT

NAME = "transformer-1b-learned-ctx8"
ZOO = Path(sys.executable).parent / "zoo"


@pytest.fixture(scope="module")
def small_text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "shakespeare-30k.txt"
    path.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    return path


def _environment() -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if key != "ZOO_REGISTRY"}
    environment["OMP_NUM_THREADS"] = "1"  # one thread per process: two processes on a shared machine
    return environment


def _zoo(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(ZOO), *args], capture_output=True, text=True, env=_environment(), timeout=600, **kwargs)


def _train(out: Path, data: Path, *extra: str) -> list[str]:
    return ["train", NAME, "--steps", "20", "--data", str(data), "--out", str(out), "--quiet", "--device", "cpu", *extra]


def _max_difference(a: Path, b: Path) -> float:
    first, second = load_file(str(a / f"{NAME}.safetensors")), load_file(str(b / f"{NAME}.safetensors"))
    assert first.keys() == second.keys()
    return max(float((first[key] - second[key]).abs().max()) for key in first)


def _card(out: Path):
    (variant,) = read_registry_file(out / "registry.toml", plugin="-")
    return variant.card


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_two_processes_end_with_the_one_process_weights(zoo, tmp_path, small_text, one_thread, monkeypatch):
    monkeypatch.delenv("ZOO_REGISTRY", raising=False)
    two, one = tmp_path / "A", tmp_path / "B"
    launched = _zoo(*_train(two, small_text, "--nproc-per-node", "2"))
    assert launched.returncode == 0, launched.stderr
    assert "on 2 processes" in launched.stdout
    assert zoo(*_train(one, small_text)).code == 0
    assert _max_difference(two, one) <= 1e-5
    two_card, one_card = _card(two), _card(one)
    assert (two_card.trained_with.world_size, one_card.trained_with.world_size) == (2, 1)
    assert two_card.trained_with.device == one_card.trained_with.device == "cpu"
    assert two_card.trained_with.dtype == "float32"
    assert two_card.metrics.validation_loss == pytest.approx(one_card.metrics.validation_loss, abs=1e-3)
    # Only rank 0 wrote, and it left nothing behind but the result (and its one run log).
    assert sorted(p.name for p in two.iterdir() if not p.name.endswith(".lock")) == sorted(
        [f"{NAME}.safetensors", f"{NAME}.history.json", f"{NAME}.log.jsonl", "registry.toml", "bpe-1024.tiktoken"])


def test_a_data_parallel_run_publishes_under_its_new_name(zoo, tmp_path, small_text, private_home):
    # Every train option reaches the workers: --publish --name lands in the user catalogue.
    launched = _zoo("train", NAME, "--steps", "4", "--data", str(small_text), "--quiet", "--device", "cpu",
                    "--nproc-per-node", "2", "--publish", "--name", "dp-1b")
    assert launched.returncode == 0, launched.stderr
    assert (private_home / "checkpoints" / "dp-1b.safetensors").exists()
    listed = zoo("list", "--source", "user", "--json")
    assert [row["name"] for row in json.loads(listed.out)] == ["dp-1b"]


def test_a_batch_that_does_not_split_is_refused_before_launching(zoo, tmp_path, small_text):
    result = zoo(*_train(tmp_path / "out", small_text, "--nproc-per-node", "3"))
    assert result.code == 1
    assert result.err.strip().splitlines() == [
        "zoo: error: the recipe's batch of 32 windows does not split evenly over 3 processes; use a number of processes that divides it"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message", [
    (["--nnodes", "2"], "with --nnodes above 1, give every machine --node-rank R"),
    (["--nproc-per-node", "0"], "--nproc-per-node and --nnodes must be at least 1"),
    (["--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:1"], "--node-rank must be between 0 and 1"),
])
def test_bad_launch_options_are_one_line(zoo, tmp_path, small_text, args, message):
    result = zoo(*_train(tmp_path / "out", small_text, *args))
    assert result.code == 1
    assert len(result.err.strip().splitlines()) == 1 and message in result.err


def test_the_worker_module_outside_torchrun_says_how_to_start_it(tmp_path):
    environment = {key: value for key, value in _environment().items() if key not in ("RANK", "WORLD_SIZE")}
    result = subprocess.run([sys.executable, "-m", "zoo_core.training.distributed", NAME, "--steps", "2"], capture_output=True,
                            text=True, env=environment, timeout=300)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "zoo: error: zoo_core.training.distributed is a torchrun worker: start it with `torchrun -m zoo_core.training.distributed NAME ...` "
        "or `zoo train NAME --nproc-per-node N`"]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _rank_of(pid: int) -> int | None:
    try:
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"RANK="):
                return int(item[5:])
    except OSError:
        return None
    return None


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the worker processes through /proc (Linux)")
def test_killing_one_process_stops_the_run_in_one_line_and_keeps_the_saved_state(tmp_path, small_text):
    out = tmp_path / "killed"
    state = out / f"{NAME}.state.safetensors"
    command = [str(ZOO), "train", NAME, "--steps", "1000000", "--checkpoint-every", "5", "--data", str(small_text),
               "--out", str(out), "--quiet", "--device", "cpu", "--nproc-per-node", "2"]
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_environment())
    try:
        deadline = time.monotonic() + 300
        while not state.exists() and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.2)
        assert state.exists(), "the run never saved its state"
        workers = {_rank_of(pid): pid for pid in _children(launcher.pid)}
        os.kill(workers[1], signal.SIGKILL)
        _, err = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"zoo: error: process 1 of the data-parallel run (pid {workers[1]}) was killed by SIGKILL; the whole run stopped")
    assert f"the last saved state is in {state}" in lines[0]
    # The state rank 0 last saved is whole: it loads, and it is a state of this run.
    tensors = load_file(str(state))
    from zoo_core.storage.checkpoints import read_header

    assert STATE_KEY in read_header(state)["__metadata__"]
    assert any(name.startswith("model.") for name in tensors) and "rng.sampler" in tensors


def _interrupted_state(tmp_path: Path, small_text: Path, steps: int, stop_after: int) -> Path:
    """Train ``stop_after`` steps of a ``steps``-step run in one process and write its state, as a killed run leaves it."""
    from zoo_core.corpus.datasets import read_text_file
    from zoo_core.loading.api import build_network, catalogue, load_tokenizer
    from zoo_core.training.job import TrainingJob
    from zoo_core.training.loop import StandardTrainer, seeded_network
    from zoo_core.training.state import run_identity, training_state_path, write_training_state

    variant = catalogue().get(NAME)
    recipe = variant.card.recipe.model_validate({**variant.card.recipe.model_dump(), "steps": steps, "data": str(small_text.resolve())})
    text = read_text_file(small_text).text
    corpus = Corpus.from_text(text, load_tokenizer(variant), recipe.train_fraction)
    network = seeded_network(lambda: build_network(variant), recipe.seed)
    path = training_state_path(tmp_path / "resumed" / f"{NAME}.safetensors")

    class Stop(Exception):
        pass

    def save_and_stop(snapshot):
        write_training_state(path, snapshot, run_identity(variant.card, recipe, text))
        raise Stop

    with pytest.raises(Stop):
        StandardTrainer().run(network, TrainingJob(recipe=recipe, corpus=corpus, context_length=variant.card.context_length,
                                                   checkpoint_every=stop_after, on_checkpoint=save_and_stop))
    return path


@pytest.mark.slow
def test_a_distributed_run_resumes_a_saved_state(zoo, tmp_path, small_text, one_thread, monkeypatch):
    monkeypatch.delenv("ZOO_REGISTRY", raising=False)
    state = _interrupted_state(tmp_path, small_text, steps=20, stop_after=10)
    resumed = _zoo(*_train(tmp_path / "resumed", small_text, "--nproc-per-node", "2", "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert not state.exists()  # rank 0 removed it once the weights were safe
    assert zoo(*_train(tmp_path / "whole", small_text)).code == 0
    assert _max_difference(tmp_path / "resumed", tmp_path / "whole") <= 1e-5
    assert _card(tmp_path / "resumed").trained_with.world_size == 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_machines_rendezvous_and_train_as_one(zoo, tmp_path, small_text, one_thread, monkeypatch):
    monkeypatch.delenv("ZOO_REGISTRY", raising=False)
    endpoint = f"127.0.0.1:{_free_port()}"
    nodes = [
        subprocess.Popen([str(ZOO), *_train(tmp_path / "nodes", small_text, "--nproc-per-node", "1", "--nnodes", "2",
                                            "--node-rank", str(rank), "--rdzv-endpoint", endpoint)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_environment())
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=600) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert "on 2 processes" in outputs[0][0] and outputs[1][0] == ""  # the second machine writes nothing
    assert zoo(*_train(tmp_path / "one", small_text)).code == 0
    assert _max_difference(tmp_path / "nodes", tmp_path / "one") <= 1e-5
    assert _card(tmp_path / "nodes").trained_with.world_size == 2
