"""One training step: the standard trainer, studies and data-parallel workers all take `training_step`."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import zoo_core
from zoo_core.catalogue.cards import Recipe
from zoo_core.corpus.batches import Corpus
from zoo_core.corpus.datasets import read_text_file
from zoo_core.errors import ZooError
from zoo_core.plugin_api.manager import get_plugins
from zoo_core.training import loop, step, studies
from zoo_core.training.job import TrainingJob

from .conftest import ROOT

NAME = "transformer-1b-learned-ctx8"  # context 8, no dropout
CONTEXT, BATCH, SEED = 8, 4, 5


@pytest.fixture(scope="module")
def corpus():
    tokenizer = zoo_core.load_tokenizer(zoo_core.get_variant(NAME))
    text = read_text_file(ROOT / "data" / "tinyshakespeare.txt").text[:60_000]
    return Corpus.from_text(text, tokenizer, 0.9)


def _standard_run(corpus, steps: int, placement=None):
    recipe = Recipe(steps=steps, batch_size=BATCH, seed=SEED, learning_rate=3e-3, weight_decay=0.01, eval_every=steps, eval_windows=8)
    network = loop.seeded_network(lambda: zoo_core.build_network(zoo_core.get_variant(NAME)), SEED)
    result = loop.StandardTrainer().run(network, TrainingJob(recipe=recipe, corpus=corpus, context_length=CONTEXT, placement=placement))
    return network, result


def _study_run(corpus, arms: list[str], steps: int, out: Path) -> list[dict]:
    """One seed of a study whose update is the standard run's batch: BATCH windows of CONTEXT tokens."""
    plugins = get_plugins()
    study = studies.StudyConfig(name="same-step", arms=arms, seeds=[SEED], steps=steps, milestones=[steps],
                                tokens_per_update=BATCH * CONTEXT, learning_rate=3e-3, weight_decay=0.01,
                                eval_every=steps, eval_targets=16, sample_tokens=2)
    found = studies._arms(arms, plugins)
    longest = max(arm.context for arm in found)
    targets = {split: studies._targets(corpus.split(split), study.eval_targets, longest, seed=1234) for split in ("train", "validation")}
    tokenizer = zoo_core.load_tokenizer(found[0].variant)
    return studies._run_seed(study, found, corpus, targets, corpus.train[:CONTEXT].tolist(), tokenizer, SEED, out, plugins, None)


def test_a_study_and_the_standard_trainer_train_the_same_weights(corpus, tmp_path):
    # The same seed, the same batches (a study draws its windows as BatchSampler
    # does), the same recipe: one step, so the same weights to the bit. Both run in this
    # process, on its threads: the same sums in the same order (docs/determinism.md).
    steps = 5
    network, result = _standard_run(corpus, steps)
    [run] = _study_run(corpus, [NAME], steps, tmp_path)
    studied = load_file(str(tmp_path / "checkpoints" / f"{NAME}-seed{SEED}-step{steps}.safetensors"))
    trained = network.state_dict()
    assert studied.keys() == trained.keys()
    differing = [name for name in trained if not torch.equal(trained[name], studied[name])]
    assert not differing, f"a study and the standard trainer took different steps: {differing}"
    assert [h["train_batch"] for h in run["history"]] == [h["train_batch"] for h in result.history]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_every_loop_steps_through_training_step(corpus, tmp_path, monkeypatch):
    # Each loop holds the one function (no copy of its own) and calls it once per update.
    assert loop.training_step is step.training_step and studies.training_step is step.training_step
    calls = []

    def counting(model, optimizer, inputs, targets, **settings):
        calls.append((type(settings["placement"]).__name__, settings["step"]))
        return step.training_step(model, optimizer, inputs, targets, **settings)

    monkeypatch.setattr(loop, "training_step", counting)
    monkeypatch.setattr(studies, "training_step", counting)

    _standard_run(corpus, 3)
    assert calls == [("Placement", 1), ("Placement", 2), ("Placement", 3)]

    calls.clear()
    _study_run(corpus, ["bigram", NAME], 3, tmp_path)
    assert calls == [("Placement", s) for s in (1, 1, 2, 2, 3, 3)]  # every arm at every update

    # A data-parallel worker (here the only one, over Gloo) trains through the standard loop.
    import torch.distributed as dist

    from zoo_core.training.distributed import DataParallelPlacement

    calls.clear()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        _standard_run(corpus, 3, placement=DataParallelPlacement(torch.device("cpu"), torch.float32, rank=0, world_size=1))
    finally:
        dist.destroy_process_group()
    assert calls == [("DataParallelPlacement", s) for s in (1, 2, 3)]


def test_a_job_refuses_bad_options_in_one_line():
    with pytest.raises(ZooError, match=r"^--checkpoint-every must be a number of steps \(0: never\), not -1$"):
        TrainingJob(variant=NAME, checkpoint_every=-1)
    with pytest.raises(ZooError, match=r"^--interim-eval-windows must be at least 1, not 0$"):
        TrainingJob(variant=NAME, interim_eval_windows=0)
    with pytest.raises(ZooError, match="--seed must be"):
        TrainingJob(variant=NAME, seed=2**64)
    with pytest.raises(ZooError, match="names the variant"):
        TrainingJob()
    with pytest.raises(AttributeError):  # frozen: what the CLI built is what the trainer reads
        TrainingJob(variant=NAME).steps = 3  # type: ignore[misc]


class _UnsizedWrapper(torch.nn.Module):
    """Calls the model it wraps, and, like torch.compile's wrapper, refuses len() (hence truth tests)."""

    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, 0

    def forward(self, inputs, targets):
        self.calls += 1
        return self.model(inputs, targets)

    def __len__(self):
        raise TypeError("no len()")


def test_the_step_runs_through_a_wrapper_that_refuses_truth_tests(corpus):
    from zoo_core.devices import Placement

    network = loop.seeded_network(lambda: zoo_core.build_network(zoo_core.get_variant(NAME)), SEED)
    wrapper = _UnsizedWrapper(network)
    recipe = Recipe(steps=1, batch_size=BATCH, seed=SEED)
    optimizer = torch.optim.SGD(network.parameters(), lr=0.1)
    inputs = corpus.train[: BATCH * CONTEXT].view(BATCH, CONTEXT)
    targets = corpus.train[1 : BATCH * CONTEXT + 1].view(BATCH, CONTEXT)
    loss = step.training_step(network, optimizer, inputs, targets, step=1, recipe=recipe, placement=Placement(), forward=wrapper).loss
    assert wrapper.calls == 1 and torch.isfinite(loss)
