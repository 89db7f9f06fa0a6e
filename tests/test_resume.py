"""Interrupted training: `kill -9`, then `--resume`, ends with the uninterrupted run's exact weights.

The corpus is the first 30,000 characters of Tiny Shakespeare, so that each
`zoo train` process spends its time training rather than tokenising.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import zoo_core
from zoo_core.catalogue.cards import Recipe
from zoo_core.catalogue.registry import Variant
from zoo_core.corpus.batches import Corpus
from zoo_core.errors import ZooError
from zoo_core.storage.checkpoints import read_header
from zoo_core.training.job import TrainingJob
from zoo_core.training.loop import StandardTrainer, seeded_network
from zoo_core.training.state import (
    STATE_KEY,
    read_training_state,
    run_identity,
    training_state_path,
    write_training_state,
)

from .conftest import ROOT

NAME = "transformer-1b-learned-ctx8"
ZOO = Path(sys.executable).parent / "zoo"


@pytest.fixture(scope="module")
def small_text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "shakespeare-30k.txt"
    path.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    return path


def _train_args(out: Path, data: Path, *extra: str) -> list[str]:
    return ["train", NAME, "--steps", "60", "--checkpoint-every", str(CHECKPOINT_EVERY), "--data", str(data), "--out", str(out), "--quiet", *extra]


@pytest.fixture
def one_thread():
    """Runs in this process use one thread, as the subprocess does (OMP_NUM_THREADS=1):
    another thread count may sum in another order and change the last bits."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def count_optimizer_steps(monkeypatch) -> dict:
    """Count the updates every optimizer the trainer makes from now on takes."""
    import zoo_core.training.loop

    counted = {"steps": 0}
    real = zoo_core.training.loop.make_optimizer

    def counting(model, recipe):
        optimizer = real(model, recipe)
        optimizer.register_step_post_hook(lambda *_: counted.__setitem__("steps", counted["steps"] + 1))
        return optimizer

    monkeypatch.setattr(zoo_core.training.loop, "make_optimizer", counting)
    return counted


CHECKPOINT_EVERY = 10  # the promise in docs/reliability.md: at most this many steps lost


def test_kill_9_then_resume_gives_the_uninterrupted_weights(zoo, tmp_path, small_text, one_thread, monkeypatch):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    environment = {key: value for key, value in os.environ.items() if key not in ("ZOO_REGISTRY", "ZOO_BUILTIN_REGISTRY")}
    victim = subprocess.Popen([str(ZOO), *_train_args(killed, small_text)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**environment, "OMP_NUM_THREADS": "1"})
    state = training_state_path(killed / f"{NAME}.safetensors")
    deadline = time.monotonic() + 120
    while not state.exists():  # renamed into place only when complete
        assert victim.poll() is None, victim.communicate()
        assert time.monotonic() < deadline, "no training state appeared"
        time.sleep(0.002)
    saved_before_kill = json.loads(read_header(state)["__metadata__"][STATE_KEY])["step"]
    os.kill(victim.pid, signal.SIGKILL)
    victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    assert not (killed / f"{NAME}.safetensors").exists(), "the run finished before it could be killed"
    interrupted_at = json.loads(read_header(state)["__metadata__"][STATE_KEY])["step"]
    assert interrupted_at in (10, 20, 30, 40, 50)
    # Steps lost: the victim died before writing its next state (at interrupted_at
    # + CHECKPOINT_EVERY), so it had taken fewer than CHECKPOINT_EVERY steps since
    # the one kept; allow for the state renamed into place between read and kill.
    assert interrupted_at - saved_before_kill in (0, CHECKPOINT_EVERY)

    # The uninterrupted run and the resumption run in this process (no second
    # torch start-up); only the run that is killed needs to be a process of its own.
    assert zoo(*_train_args(whole, small_text)).code == 0
    updates = count_optimizer_steps(monkeypatch)
    resumed = zoo(*_train_args(killed, small_text, "--resume"))
    assert resumed.code == 0, resumed.err
    # It started from the saved step: only the steps after it were taken again
    # (a "resume" that retrains from step 1 takes all 60 and ends with the same weights).
    assert updates["steps"] == 60 - interrupted_at

    expected = load_file(str(whole / f"{NAME}.safetensors"))
    actual = load_file(str(killed / f"{NAME}.safetensors"))
    assert expected.keys() == actual.keys()
    assert all(torch.equal(expected[name], actual[name]) for name in expected)
    history = [json.loads((folder / f"{NAME}.history.json").read_text())["history"] for folder in (whole, killed)]
    assert history[0] == history[1] and history[0][-1]["step"] == 60
    assert not state.exists()  # finished: nothing is left to resume


@pytest.fixture(scope="module")
def corpus(small_text):
    tokenizer = zoo_core.load_tokenizer(zoo_core.get_variant(NAME))
    return Corpus.from_text(small_text.read_text(encoding="utf-8"), tokenizer, 0.9)


def _dropout_variant() -> Variant:
    # Dropout draws on torch's global generator at every step: resuming must restore it.
    variant = zoo_core.get_variant(NAME)
    card = variant.card.model_copy(update={"config": {**variant.card.config, "dropout": 0.2}})
    return Variant(card=card, source=variant.source, plugin=variant.plugin)


@pytest.mark.parametrize("optimizer, schedule", [("adamw", "cosine"), ("sgd", "cosine"), ("muon", "wsd")])
def test_resumed_trainer_matches_uninterrupted_with_dropout(tmp_path, corpus, optimizer, schedule):
    variant = _dropout_variant()
    recipe = Recipe(optimizer=optimizer, steps=30, eval_every=10, eval_windows=16, seed=3, weight_decay=0.01,
                    grad_clip=1.0, lr_schedule=schedule, warmup_steps=5, batch_size=8)
    identity = run_identity(variant.card, recipe, "the same text")
    saved = {}

    def keep(state):
        saved[state.step] = tmp_path / f"at-{state.step}.safetensors"
        write_training_state(saved[state.step], state, identity)

    whole = seeded_network(lambda: zoo_core.build_network(variant), recipe.seed)
    expected = StandardTrainer().run(whole, TrainingJob(recipe=recipe, corpus=corpus, context_length=8, checkpoint_every=10, on_checkpoint=keep))
    assert sorted(saved) == [10, 20]  # never at the last step: the weights themselves are written then

    resumed = seeded_network(lambda: zoo_core.build_network(variant), recipe.seed)
    torch.manual_seed(12345)  # whatever the global generator holds now must not matter
    state = read_training_state(saved[10], identity, resumed)
    result = StandardTrainer().run(resumed, TrainingJob(recipe=recipe, corpus=corpus, context_length=8, resume_from=state))
    assert result.history == expected.history and result.tokens_seen == expected.tokens_seen
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), resumed.state_dict().values()))


def test_the_state_file_is_safetensors_with_everything_named(tmp_path, corpus):
    variant = zoo_core.get_variant(NAME)
    recipe = Recipe(steps=12, eval_every=6, eval_windows=8, batch_size=4)
    path = tmp_path / "state.safetensors"
    network = seeded_network(lambda: zoo_core.build_network(variant), recipe.seed)
    StandardTrainer().run(network, TrainingJob(recipe=recipe, corpus=corpus, context_length=8, checkpoint_every=6,
                          on_checkpoint=lambda state: write_training_state(path, state, run_identity(variant.card, recipe, "t"))))
    tensors = load_file(str(path))  # safetensors only: nothing here can run code
    parameters = len(list(network.parameters()))
    assert {f"model.{name}" for name in network.state_dict()} <= tensors.keys()
    assert {f"optimizer.{i}.{key}" for i in range(parameters) for key in ("exp_avg", "exp_avg_sq", "step")} <= tensors.keys()
    assert {"rng.torch", "rng.sampler"} <= tensors.keys()
    document = json.loads(read_header(path)["__metadata__"][STATE_KEY])
    assert document["step"] == 6 and [h["step"] for h in document["history"]] == [1, 6]
    assert document["identity"]["recipe"]["steps"] == 12 and document["optimizer"]["param_groups"][0]["betas"] == [0.9, 0.999]


# --- what --resume refuses, each in one line ------------------------------------


@pytest.fixture
def interrupted(tmp_path, small_text, corpus):
    """A run folder holding the state `zoo train NAME --steps 30 --data TEXT` writes
    at step 20, as if it had been killed after it; returns the folder, the state
    and TEXT (a private copy of the small corpus)."""
    out, text = tmp_path / "run", tmp_path / "text.txt"
    shutil.copyfile(small_text, text)
    variant = zoo_core.get_variant(NAME)
    recipe = variant.card.recipe.model_validate({**variant.card.recipe.model_dump(), "steps": 30, "data": str(text)})
    identity = run_identity(variant.card, recipe, text.read_text(encoding="utf-8"))
    state_path = training_state_path(out / f"{NAME}.safetensors")
    network = seeded_network(lambda: zoo_core.build_network(variant), recipe.seed)
    StandardTrainer().run(network, TrainingJob(recipe=recipe, corpus=corpus, context_length=8, checkpoint_every=20,
                          on_checkpoint=lambda state: write_training_state(state_path, state, identity)))
    return out, state_path, text


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def test_resume_with_nothing_to_resume(zoo, tmp_path):
    result = zoo("train", NAME, "--out", str(tmp_path / "empty"), "--resume")
    _one_line_error(result, f"{tmp_path / 'empty' / NAME}.state.safetensors: nothing to resume")
    assert not (tmp_path / "empty").exists()


def test_the_interrupted_state_resumes_in_process(zoo, interrupted, monkeypatch):
    out, state_path, text = interrupted
    updates = count_optimizer_steps(monkeypatch)
    result = zoo("train", NAME, "--steps", "30", "--data", str(text), "--out", str(out), "--resume")
    assert result.code == 0, result.err
    assert updates["steps"] == 10  # steps 21..30: the first 20 came from the state
    assert f"resuming at step 21 of 30 from {state_path}" in result.err
    assert not state_path.exists() and (out / f"{NAME}.safetensors").exists()


def test_resume_with_another_recipe_names_the_field(zoo, interrupted):
    out, state_path, text = interrupted
    result = zoo("train", NAME, "--steps", "40", "--data", str(text), "--out", str(out), "--resume", "--quiet")
    _one_line_error(result, f"{state_path}: cannot resume", "recipe.steps = 30, this run has 40", "same --steps")
    assert state_path.exists()  # refused, not destroyed


def test_resume_on_an_edited_corpus_is_refused(zoo, interrupted):
    out, state_path, text = interrupted
    text.write_text(text.read_text(encoding="utf-8").replace("Citizen", "Burgher"), encoding="utf-8")
    result = zoo("train", NAME, "--steps", "30", "--data", str(text), "--out", str(out), "--resume", "--quiet")
    _one_line_error(result, f"{state_path}: cannot resume: the corpus is not the text the interrupted run trained on")


def test_resume_with_another_variants_state(zoo, interrupted):
    out, state_path, text = interrupted
    other = "transformer-2b-learned-ctx8"
    shutil.copyfile(state_path, out / f"{other}.state.safetensors")
    result = zoo("train", other, "--steps", "30", "--data", str(text), "--out", str(out), "--resume", "--quiet")
    _one_line_error(result, "cannot resume: the state belongs to a run of 'transformer-1b-learned-ctx8', not 'transformer-2b-learned-ctx8'")


def test_resume_from_a_damaged_state(zoo, interrupted):
    out, state_path, text = interrupted
    data = state_path.read_bytes()
    state_path.write_bytes(data[: len(data) // 2])
    result = zoo("train", NAME, "--steps", "30", "--data", str(text), "--out", str(out), "--resume", "--quiet")
    _one_line_error(result, str(state_path), "damaged training state", "file not fully covered")


def test_damaged_optimizer_state_is_refused_before_training(tmp_path, interrupted):
    from safetensors.torch import save_file

    _, state_path, _ = interrupted
    tensors = load_file(str(state_path))
    tensors["optimizer.0.exp_avg"] = torch.zeros(3)
    damaged = tmp_path / "damaged.safetensors"
    save_file(tensors, str(damaged), metadata=read_header(state_path)["__metadata__"])
    identity = json.loads(read_header(state_path)["__metadata__"][STATE_KEY])["identity"]
    network = zoo_core.build_network(zoo_core.get_variant(NAME))
    with pytest.raises(ZooError, match="damaged training state: optimizer exp_avg of parameter 0 is \\[3\\]"):
        read_training_state(damaged, identity, network)


def test_checkpoint_every_must_not_be_negative(zoo, tmp_path):
    result = zoo("train", NAME, "--checkpoint-every", "-5", "--out", str(tmp_path / "o"))
    _one_line_error(result, "--checkpoint-every must be a number of steps (0: never), not -5")
