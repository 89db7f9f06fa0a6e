"""examples/zoo-lion, installed by pip: a third-party trainer trains through `zoo train`,
resumes after kill -9 to the uninterrupted run's exact weights, passes
`zoo check-plugin`, and its variant is compared with a built-in one by `zoo compare`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from zoo_core.storage.checkpoints import read_header
from zoo_core.training.state import STATE_KEY, training_state_path

from .conftest import ROOT
from .test_third_party_plugins import ZOO, pip_install, run_zoo

EXAMPLE = ROOT / "examples" / "zoo-lion"
NAME = "lion-1b-learned-ctx8"


@pytest.fixture(scope="module")
def lion(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lion")
    source = root / "zoo-lion"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache", "*.lock"))
    pip_install(root / "site", source)
    return root / "site"


@pytest.fixture(scope="module")
def small_text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "shakespeare-30k.txt"
    path.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    return path


def test_the_trainer_is_registered_and_passes_zoo_check_plugin(lion):
    report = run_zoo("plugins", "--json", path=(lion,))
    assert report.code == 0, report.err
    registered = {p["name"]: p for p in report.json()["plugins"]}["lion"]["registered"]
    assert registered["trainers"] == ["lion"]
    checked = run_zoo("check-plugin", "lion", path=(lion,))
    assert checked.code == 0, checked.out + checked.err
    assert "ok   trainer 'lion': deterministic, and resumes exactly" in checked.out
    assert "ok   variant 'lion-1b-learned-ctx8': loads with verified weights" in checked.out


def _train(out: Path, data: Path, *extra: str) -> list[str]:
    return ["train", NAME, "--steps", "40", "--checkpoint-every", "10", "--data", str(data), "--out", str(out), "--quiet", *extra]


@pytest.mark.slow  # three zoo processes; the kit proves exact resumption in-process in the test above
def test_kill_9_then_resume_gives_the_uninterrupted_lion_weights(lion, small_text, tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    environment = {key: value for key, value in os.environ.items() if key not in {"ZOO_REGISTRY", "ZOO_PLUGINS"}}
    environment.update(PYTHONPATH=str(lion), OMP_NUM_THREADS="1")
    victim = subprocess.Popen([str(ZOO), *_train(killed, small_text)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=environment)
    state = training_state_path(killed / f"{NAME}.safetensors")
    deadline = time.monotonic() + 180
    while not state.exists():  # renamed into place only when complete
        assert victim.poll() is None, victim.communicate()
        assert time.monotonic() < deadline, "no training state appeared"
        time.sleep(0.002)
    os.kill(victim.pid, signal.SIGKILL)
    victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    assert not (killed / f"{NAME}.safetensors").exists(), "the run finished before it could be killed"
    document = json.loads(read_header(state)["__metadata__"][STATE_KEY])
    assert document["step"] in (10, 20, 30)
    assert document["identity"]["recipe"]["kind"] == "lion"
    # Lion's only state, its running average, is in the file by name.
    assert any(name.endswith(".exp_avg") for name in load_file(str(state)))

    uninterrupted = run_zoo(*_train(whole, small_text), path=(lion,))
    assert uninterrupted.code == 0, uninterrupted.err
    resumed = run_zoo(*_train(killed, small_text, "--resume"), path=(lion,))
    assert resumed.code == 0, resumed.err
    expected = load_file(str(whole / f"{NAME}.safetensors"))
    actual = load_file(str(killed / f"{NAME}.safetensors"))
    assert expected.keys() == actual.keys() and all(torch.equal(expected[n], actual[n]) for n in expected)


def test_the_lion_variant_is_compared_with_its_adamw_twin(lion):
    done = run_zoo("compare", NAME, "transformer-1b-learned-ctx8", "--windows", "32", "--max-new-tokens", "10",
                   "--data", str(ROOT / "data" / "tinyshakespeare.txt"), "--json", path=(lion,))
    assert done.code == 0, done.err
    models = {m["name"]: m for m in done.json()["models"]}
    assert set(models) == {NAME, "transformer-1b-learned-ctx8"}
    # Both far below guessing uniformly over 1024 tokens (ln 1024 = 6.93).
    assert all(m["validation_loss"] < 4.6 for m in models.values())
