"""A kill -9 at any point of publishing, removing, importing or installing leaves
the old variant whole or the new one whole: never a mix, never a broken catalogue.

Not random delays (ten of those never hit the windows that mattered): the
ZOO_FAULT_AT=N hook of zoo_core.storage.files kills the command with SIGKILL at
its N-th fault point, one before and one after every file operation; each
sweep runs the command once per point, N = 1, 2, ... until it completes, each
time from the same starting catalogue, and checks what the kill left.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch

from zoo_core.loading.verify import FAILED, LEFTOVER, OK, verify_catalogue
from zoo_core.plugin_api.manager import get_plugins
from zoo_core.storage.staging import make_staging_folder, owner_gone, remove_leftover_staging, start_time

ZOO = Path(sys.executable).parent / "zoo"
PROMPT = ("--prompt", "ROMEO:", "--max-new-tokens", "24", "--seed", "3")
MOST_POINTS = 60  # every sweep here completes well before; more means a loop
SMALL = "transformer-1b-learned-ctx8"


def _run(args: list[str], fault_at: int | None = None) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("ZOO_FAULT")}
    environment["OMP_NUM_THREADS"] = "1"
    if fault_at is not None:
        environment["ZOO_FAULT_AT"] = str(fault_at)
    return subprocess.run([str(ZOO), *args], capture_output=True, text=True, env=environment, timeout=300)


def _state(zoo, name: str) -> str | None:
    """What the catalogue holds as ``name`` after a kill: None when it is absent,
    else its samples; the catalogue must verify, and the history beside the
    checkpoint (if any) must be the one of the card's own run."""
    get_plugins(reload=True)
    rows = [row for row in verify_catalogue(name) if row.name in (name, "-")]
    assert all(row.status == OK for row in rows), [row.as_dict() for row in rows]
    if not rows:
        return None
    from zoo_core.loading.api import catalogue

    variant = catalogue().get(name)
    history = variant.checkpoint_path.with_suffix(".history.json")
    if history.exists():
        assert json.loads(history.read_text())["recipe"]["steps"] == variant.card.recipe.steps, "history of another run"
    sampled = zoo("sample", name, *PROMPT)
    assert sampled.code == 0, sampled.err
    return sampled.out


def _sweep(
    zoo,
    home: Path,
    args: list[str],
    name: str,
    before: str | None,
    after: str | None,
    first: int = 1,
    after_kill: Callable[[Path], None] | None = None,
) -> int:
    """Kill ``zoo ARGS`` at every fault point from ``first`` on, each time from a
    copy of ``home`` as it is now; after each kill ``name`` must be ``before`` or
    ``after`` (its samples, None for absent), and ``after_kill(home)`` holds.
    Returns how many points were killed."""
    start = home.with_name("start")
    shutil.copytree(home, start, symlinks=True)
    seen = set()
    for point in range(first, MOST_POINTS):
        shutil.rmtree(home)
        shutil.copytree(start, home, symlinks=True)
        result = _run(args, fault_at=point)
        if result.returncode == 0:
            assert _state(zoo, name) == after
            assert seen == {before, after}, "the kills never fell on one side of the commit point"
            return point - first
        assert result.returncode == -signal.SIGKILL, (point, result.stderr)
        state = _state(zoo, name)
        assert state in (before, after), f"killed at point {point}: neither the old nor the new variant"
        seen.add(state)
        if after_kill is not None:
            after_kill(home)
    pytest.fail(f"`zoo {' '.join(args)}` did not complete within {MOST_POINTS} fault points")


@pytest.fixture
def published(zoo, private_home):
    """my-bigram published once (2 steps); the samples it gives."""
    result = zoo("train", "bigram", "--steps", "2", "--publish", "--name", "my-bigram", "--quiet")
    assert result.code == 0, result.err
    return _state(zoo, "my-bigram")


def _new_samples(zoo, tmp_path, args: list[str], name: str) -> str:
    """The samples ``zoo ARGS`` gives when nothing stops it, found in this process
    on a copy of the home, which is then put back as it was."""
    home = Path(os.environ["ZOO_HOME"])
    saved = tmp_path / "saved-home"
    shutil.copytree(home, saved, symlinks=True)
    result = zoo(*args)
    assert result.code == 0, result.err
    samples = _state(zoo, name)
    shutil.rmtree(home)
    shutil.copytree(saved, home, symlinks=True)
    shutil.rmtree(saved)
    return samples


REPUBLISH = ["train", "bigram", "--steps", "3", "--seed", "7", "--publish", "--name", "my-bigram", "--replace", "--quiet"]


def test_a_remove_killed_at_any_point_leaves_the_variant_or_nothing(zoo, private_home, published):
    """The fast representative (no torch in `zoo remove`): every point."""
    assert _sweep(zoo, private_home, ["remove", "my-bigram"], "my-bigram", published, None) >= 2
    assert not (private_home / "checkpoints").exists()  # emptied, then removed
    # The run's log stays, beside the catalogue (not among its weights): the record of what was done.
    assert sorted(path.name for path in (private_home / "runs" / "my-bigram").iterdir()) == ["my-bigram.log.jsonl"]


def test_an_import_killed_either_side_of_its_commit_point_is_old_then_new(zoo, tmp_path, private_home):
    """Points 5 and 6 of `zoo import` are the registry's new text written and
    renamed into place: the old variant before, the new one after."""
    old = zoo("import", "nanogpt", str(_nanogpt_checkpoint(tmp_path / "old.pt", 1)), "--name", "nano")
    assert old.code == 0, old.err
    before = _state(zoo, "nano")
    args = ["import", "nanogpt", str(_nanogpt_checkpoint(tmp_path / "new.pt", 2)), "--name", "nano", "--replace"]
    after = _new_samples(zoo, tmp_path, args, "nano")
    assert after != before
    for point, expected in ((5, before), (6, after)):
        result = _run(args, fault_at=point)
        assert result.returncode == -signal.SIGKILL, result.stderr
        assert _state(zoo, "nano") == expected, f"killed at point {point}"
    result = _run(args)  # and a later run cleans what the killed one left
    assert result.returncode == 0, result.stderr
    files = sorted(path.name for path in (private_home / "checkpoints").iterdir())
    assert files == ["nano.safetensors", "nano.tokenizer.json"], files


@pytest.mark.slow
def test_a_kill_at_any_point_of_a_publish_leaves_old_or_new(zoo, tmp_path, private_home, published):
    new = _new_samples(zoo, tmp_path, REPUBLISH, "my-bigram")
    assert new != published
    assert _sweep(zoo, private_home, REPUBLISH, "my-bigram", published, new) >= 10
    files = sorted(path.name for path in (private_home / "checkpoints").iterdir())
    assert files == ["bpe-1024.tiktoken", "my-bigram.history.json", "my-bigram.safetensors"], files


@pytest.mark.slow
def test_a_kill_at_any_point_of_an_install_leaves_nothing_or_the_variant(zoo, tmp_path, private_home, published):
    archive = tmp_path / "my-bigram.zoo"
    assert zoo("pack", "my-bigram", "--out", str(archive)).code == 0
    args = ["install", str(archive), "--name", "copied"]
    assert _sweep(zoo, private_home, args, "copied", None, published, after_kill=_leftovers_listed_then_removed) >= 6


def _leftovers_listed_then_removed(home: Path) -> None:
    """What a killed install leaves beside the catalogue is its staging folder at
    most: `zoo verify` lists it without failing, and the next command removes it."""
    staging = sorted(home.glob(".installing-*"))
    rows = verify_catalogue()
    assert all(row.status != FAILED for row in rows), [row.as_dict() for row in rows if row.status == FAILED]
    assert sorted(row.file for row in rows if row.status == LEFTOVER) == [str(folder) for folder in staging]
    assert remove_leftover_staging(home) == staging and not list(home.glob(".installing-*"))


def test_an_install_killed_while_extracting_leaves_a_folder_the_next_install_removes(zoo, tmp_path, private_home):
    """A real `zoo install` killed with SIGKILL after its first member was
    extracted: its staging folder (a copy of that member) stays, named after the
    dead process; `zoo verify` lists it and passes; the next install removes it."""
    archive = tmp_path / "small.zoo"
    assert zoo("pack", SMALL, "--out", str(archive)).code == 0
    killed = _run(["install", str(archive), "--name", "copied"], fault_at=1)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    [staging] = private_home.glob(".installing-*")
    assert (staging / "weights.safetensors").is_file()
    assert re.fullmatch(r"\.installing-\d+-\d+-.+", staging.name) and owner_gone(staging)
    verified = zoo("verify")
    assert verified.code == 0, verified.err
    assert "leftover" in verified.out and "the next install, pull or `zoo cache clear` removes it" in verified.out
    installed = zoo("install", str(archive), "--name", "copied")
    assert installed.code == 0, installed.err
    assert not list(private_home.glob(".installing-*"))
    assert _state(zoo, "copied") is not None


def test_a_pull_killed_while_installing_leaves_a_folder_the_next_pull_removes(zoo, tmp_path, private_home):
    folder = tmp_path / "shared-drive"
    assert zoo("remote", "publish", str(folder), SMALL).code == 0
    assert zoo("remote", "add", "drive", str(folder)).code == 0
    killed = _run(["pull", f"drive/{SMALL}", "--name", "pulled"], fault_at=1)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(list(private_home.glob(".installing-*"))) == 1
    refused = zoo("pull", "drive/no-such-variant")  # even a pull that finds nothing to install
    assert refused.code == 1 and "no remote offers 'no-such-variant'" in refused.err
    assert not list(private_home.glob(".installing-*"))


def test_cache_clear_removes_the_staging_folders_of_dead_owners_only(zoo, tmp_path, private_home):
    """Owner gone: the pid is not running, or it is but started at another time
    (the pid was reused). Owner running: kept, whatever its age."""
    archive = tmp_path / "small.zoo"
    assert zoo("pack", SMALL, "--out", str(archive)).code == 0
    killed = _run(["install", str(archive), "--name", "copied"], fault_at=1)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    [dead] = private_home.glob(".installing-*")
    running = make_staging_folder(private_home)  # this test's own process: alive
    reused = private_home / f".installing-{os.getpid()}-{start_time(os.getpid()) + 1}-abc"
    reused.mkdir()
    older = private_home / ".installing-k2j4x9_q"  # an older zoo's, which recorded no owner
    older.mkdir()
    cleared = zoo("cache", "clear")
    assert cleared.code == 0, cleared.err
    assert f"removed {dead} (" in cleared.out and "left by an install or pull that was killed" in cleared.out
    assert sorted(private_home.glob(".installing-*")) == [running]
    assert zoo("verify").code == 0 and "leftover" not in zoo("verify").out


def _nanogpt_checkpoint(path: Path, seed: int) -> Path:
    """A tiny checkpoint in the layout nanoGPT's train.py writes (random weights)."""
    generator = torch.Generator().manual_seed(seed)
    n_embd, vocab, block = 16, 65, 16

    def weights(*shape):
        return torch.randn(*shape, generator=generator) * 0.1

    state = {"transformer.wte.weight": weights(vocab, n_embd), "transformer.wpe.weight": weights(block, n_embd)}
    state.update({
        "transformer.h.0.ln_1.weight": torch.ones(n_embd),
        "transformer.h.0.attn.c_attn.weight": weights(3 * n_embd, n_embd),
        "transformer.h.0.attn.c_proj.weight": weights(n_embd, n_embd),
        "transformer.h.0.ln_2.weight": torch.ones(n_embd),
        "transformer.h.0.mlp.c_fc.weight": weights(4 * n_embd, n_embd),
        "transformer.h.0.mlp.c_proj.weight": weights(n_embd, 4 * n_embd),
        "transformer.ln_f.weight": torch.ones(n_embd),
    })
    state["lm_head.weight"] = state["transformer.wte.weight"]
    model_args = dict(n_layer=1, n_head=2, n_embd=n_embd, block_size=block, bias=False, vocab_size=vocab, dropout=0.0)
    torch.save({"model": state, "model_args": model_args, "iter_num": 1, "config": {}}, path)
    return path


@pytest.mark.slow
def test_a_kill_at_any_point_of_an_import_leaves_old_or_new(zoo, tmp_path, private_home):
    old = zoo("import", "nanogpt", str(_nanogpt_checkpoint(tmp_path / "old.pt", 1)), "--name", "nano")
    assert old.code == 0, old.err
    before = _state(zoo, "nano")
    args = ["import", "nanogpt", str(_nanogpt_checkpoint(tmp_path / "new.pt", 2)), "--name", "nano", "--replace"]
    after = _new_samples(zoo, tmp_path, args, "nano")
    assert after != before
    assert _sweep(zoo, private_home, args, "nano", before, after) >= 4


# --- preconditions, and failures after work started --------------------------


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


@pytest.fixture
def no_training(monkeypatch):
    """A tripwire: the first training step (the optimizer made for it) fails the test."""
    import zoo_core.training.loop

    def tripped(*_):
        raise AssertionError("training started before the destination was checked")

    monkeypatch.setattr(zoo_core.training.loop, "make_optimizer", tripped)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only (chmod 555) folder anyway; "
                    "test_a_destination_that_cannot_be_a_folder_is_refused_before_any_training_step stands in")
def test_a_read_only_home_is_refused_before_any_training_step(zoo, private_home, no_training):
    private_home.mkdir(parents=True)
    private_home.chmod(0o555)
    try:
        result = zoo("train", "bigram", "--steps", "50", "--publish", "--name", "my-bigram")
        _one_line_error(result, str(private_home), "nothing was trained")
    finally:
        private_home.chmod(0o755)
    assert list(private_home.iterdir()) == []


def test_a_destination_that_cannot_be_a_folder_is_refused_before_any_training_step(zoo, tmp_path, no_training):
    (tmp_path / "a-file").write_text("not a folder")
    result = zoo("train", "bigram", "--steps", "50", "--out", str(tmp_path / "a-file" / "run"))
    _one_line_error(result, "a-file", "not a folder")


def test_too_little_free_space_is_refused_before_any_training_step(zoo, tmp_path, monkeypatch, no_training):
    import collections

    import zoo_core.training.destination

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(zoo_core.training.destination.shutil, "disk_usage", lambda _: usage(10**9, 10**9, 1000))
    result = zoo("train", "bigram", "--steps", "50", "--out", str(tmp_path / "run"))
    _one_line_error(result, "1,000 bytes free, the run needs about", "checkpoint 260.0 KiB, training states 2.0 MiB", "nothing was trained")


def test_a_full_disk_at_the_registry_leaves_no_checkpoint_without_a_card(zoo, private_home, monkeypatch, published):
    """The checkpoint is written, then the registry cannot be: the new files are
    deleted, the old variant stays whole, and the message says so."""
    import errno

    import zoo_core.storage.files

    before = sorted(path.name for path in (private_home / "checkpoints").iterdir())
    real = os.write

    def full_at_the_registry(fd, data):
        if "registry.toml" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(zoo_core.storage.files, "_write", full_at_the_registry)
    result = zoo("train", "bigram", "--steps", "3", "--seed", "7", "--publish", "--name", "my-bigram", "--replace",
                 "--quiet")
    _one_line_error(result, "No space left on device", "not published: the new files were deleted",
                    "no training state was saved")
    monkeypatch.setattr(zoo_core.storage.files, "_write", real)
    assert sorted(path.name for path in (private_home / "checkpoints").iterdir()) == before
    assert _state(zoo, "my-bigram") == published


def test_remove_refuses_a_checkpoint_symlinked_out_of_its_folder_and_deletes_nothing(zoo, tmp_path, private_home,
                                                                                     published):
    checkpoint = private_home / "checkpoints" / "my-bigram.safetensors"
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(checkpoint.read_bytes())
    checkpoint.unlink()
    checkpoint.symlink_to(outside)
    registry = (private_home / "registry.toml").read_bytes()
    _one_line_error(zoo("remove", "my-bigram"), "symlink leading out", "nothing was deleted")
    assert (private_home / "registry.toml").read_bytes() == registry
    assert checkpoint.is_symlink() and outside.exists()
