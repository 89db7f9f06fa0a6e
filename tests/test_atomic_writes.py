"""Writes that fail or are killed half way leave the old file whole; two writers never clash.

Every file the zoo writes (checkpoints, cards, registry, history, training state,
tokenizer files) goes through ``atomic_write``; these tests break that write
in the two ways the world does: an exception inside it, and ``kill -9``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

import zoo_core
from zoo_core.catalogue.registry import read_registry_file
from zoo_core.errors import ZooError
from zoo_core.storage.checkpoints import load_verified, save_checkpoint, sha256_file
from zoo_core.storage.files import atomic_write, atomic_write_text, exclusive_lock, remove_stale_temporaries

from .conftest import ROOT

SHIPPED = ROOT / "checkpoints" / "transformer-1b-learned-ctx8.safetensors"


def _temporaries(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_an_exception_inside_the_write_leaves_the_old_file(tmp_path):
    target = tmp_path / "card.json"
    target.write_text("old and complete\n")

    def write_half_then_fail(temporary):
        temporary.write_text("new but only ha")
        raise OSError("disk full")

    with pytest.raises(ZooError, match="card.json: cannot write: disk full \\(nothing was changed\\)"):
        atomic_write(target, write_half_then_fail)
    assert target.read_text() == "old and complete\n"
    assert _temporaries(tmp_path) == []  # the half-written temporary is gone too


def test_a_checkpoint_that_fails_to_save_leaves_the_old_one_loadable(tmp_path):
    checkpoint = tmp_path / "transformer-1b-learned-ctx8.safetensors"
    shutil.copyfile(SHIPPED, checkpoint)
    before = sha256_file(checkpoint)
    shared = torch.zeros(4)
    # Two names for one storage are refused (as safetensors does) before anything is written.
    with pytest.raises(ZooError, match="share memory"):
        save_checkpoint(checkpoint, {"a": shared, "b": shared}, {"name": "x"})
    assert sha256_file(checkpoint) == before and _temporaries(tmp_path) == []
    variant = zoo_core.get_variant("transformer-1b-learned-ctx8")
    network = zoo_core.build_network(variant)
    assert load_verified(checkpoint, before, network, variant.card.parameters).tensors == 16


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from zoo_core.storage.files import atomic_write

    def slow_write(temporary):
        with open(temporary, "wb") as handle:
            handle.write(b"N" * 100_000)  # half of the new file
            handle.flush()
        print("half written", flush=True)
        time.sleep(60)  # killed here

    atomic_write(Path(sys.argv[1]), slow_write)
""")


def test_a_writer_killed_mid_write_leaves_the_old_file(tmp_path):
    target = tmp_path / "model.safetensors"
    target.write_bytes(b"O" * 50_000)
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "half written\n"
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    assert target.read_bytes() == b"O" * 50_000
    leftovers = _temporaries(tmp_path)
    assert len(leftovers) == 1 and leftovers[0].startswith(".model.safetensors.")
    remove_stale_temporaries(target)  # what the next run writing this file does first, under its lock
    assert _temporaries(tmp_path) == [] and target.read_bytes() == b"O" * 50_000


LOCK_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from zoo_core.storage.files import exclusive_lock

    with exclusive_lock(Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(60)
""")


def test_a_second_run_into_the_same_place_is_refused(zoo, tmp_path):
    out = tmp_path / "run"
    checkpoint = out / "transformer-1b-learned-ctx8.safetensors"
    corpus = tmp_path / "text.txt"
    corpus.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text()[:20_000])
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(checkpoint)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"  # another process is writing this variant here
        result = zoo("train", "transformer-1b-learned-ctx8", "--steps", "5", "--data", str(corpus), "--out", str(out), "--quiet")
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert result.code == 1 and result.err.count("\n") == 1, result.err
    assert f"zoo: error: {checkpoint} is being written by another zoo process" in result.err
    assert not checkpoint.exists() and not (out / "registry.toml").exists()


REGISTRY_WRITER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from zoo_core.catalogue.cards import ModelCard
    from zoo_core.storage.files import exclusive_lock
    from zoo_core.catalogue.registry import upsert_registry_entry

    registry, card = Path(sys.argv[1]), ModelCard.model_validate(json.loads(sys.argv[2]))
    print("ready", flush=True)
    sys.stdin.readline()  # both writers start together
    for number in range(25):
        with exclusive_lock(registry):  # read, modify, write: without the lock, about half the entries are lost
            upsert_registry_entry(registry, card.model_copy(update={"name": f"{card.name}-{number}"}))
""")


def test_two_processes_updating_one_registry_lose_nothing(tmp_path):
    registry = tmp_path / "registry.toml"
    atomic_write_text(registry, "# two writers\n")
    base = zoo_core.get_variant("bigram").card
    writers = [
        subprocess.Popen([sys.executable, "-c", REGISTRY_WRITER, str(registry), base.model_copy(update={"name": name}).model_dump_json()],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for name in ("first", "second")
    ]
    for writer in writers:
        assert writer.stdout.readline() == "ready\n"
    for writer in writers:
        writer.stdin.write("go\n")
        writer.stdin.flush()
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    names = {variant.name for variant in read_registry_file(registry, plugin="test")}
    assert names == {f"{writer}-{number}" for writer in ("first", "second") for number in range(25)}
    assert registry.read_text().startswith("# two writers\n")


def test_holding_the_lock_without_waiting_is_an_error(tmp_path):
    target = tmp_path / "registry.toml"
    with exclusive_lock(target):
        with pytest.raises(ZooError, match="is being written by another zoo process"):
            with exclusive_lock(target, wait=False):
                pass
