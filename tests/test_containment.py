"""Containment: a card's paths stay inside its registry's folder; only regular files are opened."""

from __future__ import annotations

import os
import signal
import struct
from pathlib import Path

import pytest

from zoo_core.catalogue.paths import resolve_inside
from zoo_core.catalogue.registry import read_registry_file
from zoo_core.errors import ZooError
from zoo_core.storage.files import read_limited

from .hostile_cards import BASE, card_data, hostile_variant, write_catalogue

SECRET = b"root:x:0:0:root:/root:/bin/bash\n"


@pytest.fixture
def never_blocks():
    """Fail (instead of hanging the suite) if the code under test blocks for 20 s."""

    def timeout(*_):
        raise AssertionError("blocked for 20 s")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def _never_echoes(text: str) -> None:
    """Neither the secret's bytes nor its first 8 bytes read as a number (the
    safetensors header length) may appear in a message."""
    assert "root:x" not in text and "/bin/bash" not in text
    assert str(struct.unpack("<Q", SECRET[:8])[0]) not in text


# --- resolve_inside -----------------------------------------------------------------


def test_resolve_inside(tmp_path):
    base = tmp_path / "catalogue"
    (base / "checkpoints").mkdir(parents=True)
    (base / "checkpoints" / "w.safetensors").write_bytes(b"x")
    (tmp_path / "outside.txt").write_bytes(SECRET)
    assert resolve_inside(base, "checkpoints/w.safetensors") == (base / "checkpoints" / "w.safetensors").resolve()
    assert resolve_inside(base, "checkpoints/./w.safetensors").name == "w.safetensors"
    for hostile, reason in [
        ("../outside.txt", "leaves its registry's folder"),
        ("checkpoints/../../outside.txt", "leaves its registry's folder"),
        (str(tmp_path / "outside.txt"), "is absolute"),
        ("/etc/passwd", "is absolute"),
        ("~/.ssh/id_rsa", "is absolute"),
        ("C:\\Windows\\win.ini", "is absolute"),
        ("checkpoints/\x00evil", "NUL"),
    ]:
        with pytest.raises(ZooError, match=reason):
            resolve_inside(base, hostile, what="checkpoint path")
    (base / "checkpoints" / "out").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(ZooError, match="is a symlink leading out of its registry's folder"):
        resolve_inside(base, "checkpoints/out")
    (base / "checkpoints" / "dir-out").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(ZooError, match="symlink leading out"):
        resolve_inside(base, "checkpoints/dir-out/outside.txt")
    (base / "checkpoints" / "in").symlink_to(base / "checkpoints" / "w.safetensors")  # a link inside is fine
    assert resolve_inside(base, "checkpoints/in").name == "w.safetensors"
    assert resolve_inside(base, "../outside.txt", allow_outside=True) == (tmp_path / "outside.txt").resolve()


# --- through the CLI ------------------------------------------------------------------


ESCAPES = [
    ("checkpoint__path", "../../../../../../../../etc/passwd", "checkpoint path '../../../../../../../../etc/passwd' leaves"),
    ("checkpoint__path", "/etc/passwd", "checkpoint path '/etc/passwd' is absolute"),
    ("checkpoint__path", "checkpoints/link.safetensors", "checkpoint path 'checkpoints/link.safetensors' is a symlink leading out"),
    ("tokenizer__file", "../secret.txt", "tokenizer path '../secret.txt' leaves"),
    ("tokenizer__file", "checkpoints/link.safetensors", "tokenizer path 'checkpoints/link.safetensors' is a symlink leading out"),
]


@pytest.mark.parametrize("field, value, message", ESCAPES)
def test_paths_leading_out_are_refused_by_load_and_verify(zoo, tmp_path, use_registry, field, value, message):
    (tmp_path / "secret.txt").write_bytes(SECRET)
    folder = tmp_path / "catalogue"
    registry = hostile_variant(folder, "escape", **{field: value, "checkpoint__sha256": None} if field.startswith("checkpoint") else {field: value})
    (folder / "checkpoints" / "link.safetensors").symlink_to(tmp_path / "secret.txt")
    use_registry(registry)
    result = zoo("load", "escape")
    _one_line_error(result, f"variant 'escape': {message}", "allow_external_paths = true")
    _never_echoes(result.err)
    verified = zoo("verify")
    assert verified.code == 1 and "FAILED" in verified.out and message.split("'")[0] in verified.out
    _never_echoes(verified.out + verified.err)


def test_a_corpus_path_leading_out_is_refused(zoo, tmp_path, use_registry):
    (tmp_path / "secret.txt").write_bytes(SECRET * 10)
    use_registry(hostile_variant(tmp_path / "catalogue", "escape", recipe__data="../secret.txt"))
    result = zoo("train", "escape", "--steps", "1", "--out", str(tmp_path / "run"), "--quiet")
    _one_line_error(result, "recipe.data '../secret.txt' leaves its registry's folder")
    assert not (tmp_path / "run").exists()


def test_your_own_card_may_opt_in(zoo, tmp_path, use_registry):
    """A catalogue whose checkpoints/ is a symlink to the shipped folder: refused,
    until the card says allow_external_paths = true."""
    from .conftest import ROOT

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "checkpoints").symlink_to(ROOT / "checkpoints", target_is_directory=True)
    registry = hostile_variant(folder, BASE)
    use_registry(registry)
    _one_line_error(zoo("load", BASE), "is a symlink leading out of its registry's folder")
    registry = hostile_variant(folder, BASE, allow_external_paths=True)
    use_registry(registry)
    result = zoo("load", BASE)
    assert result.code == 0, result.err
    assert f"checkpoint {ROOT / 'checkpoints' / BASE}.safetensors" in result.out


def test_a_plugins_registry_may_not_opt_in(tmp_path):
    data = card_data()
    data["allow_external_paths"] = True
    registry = write_catalogue(tmp_path, {"plugin-variant": data}, copy_files=False)
    with pytest.raises(ZooError, match="allow_external_paths is only honoured in your own catalogue, not in plugin 'someone'"):
        read_registry_file(registry, "someone", layer="plugin")
    assert read_registry_file(registry, "catalogue")[0].card.allow_external_paths


def test_the_opt_in_is_not_part_of_the_weights_identity(tmp_path):
    """The header card check ignores allow_external_paths: moving files is not retraining."""
    import zoo_core

    card = zoo_core.get_variant(BASE).card
    assert card.model_copy(update={"allow_external_paths": True}).header_json() == card.header_json()


# --- only regular files, never blocking -----------------------------------------------


def test_a_fifo_checkpoint_is_refused_at_once(zoo, tmp_path, use_registry, never_blocks):
    folder = tmp_path / "catalogue"
    registry = hostile_variant(folder, "fifo", checkpoint__path="checkpoints/fifo.safetensors", checkpoint__sha256=None)
    os.mkfifo(folder / "checkpoints" / "fifo.safetensors")
    use_registry(registry)
    _one_line_error(zoo("load", "fifo"), "fifo.safetensors: checkpoint is a FIFO, not a regular file")
    verified = zoo("verify")
    assert verified.code == 1 and "checkpoint is a FIFO" in verified.out


def test_a_fifo_tokenizer_and_registry_are_refused_at_once(zoo, tmp_path, use_registry, never_blocks):
    folder = tmp_path / "catalogue"
    registry = hostile_variant(folder, "fifo", tokenizer__file="checkpoints/fifo.tiktoken")
    os.mkfifo(folder / "checkpoints" / "fifo.tiktoken")
    use_registry(registry)
    _one_line_error(zoo("load", "fifo"), "fifo.tiktoken: tokenizer file is a FIFO, not a regular file")
    fifo_registry = tmp_path / "fifo.toml"
    os.mkfifo(fifo_registry)
    use_registry(fifo_registry)
    _one_line_error(zoo("list"), "fifo.toml: registry file is a FIFO, not a regular file")


def test_read_limited_refuses_folders_and_devices(tmp_path, never_blocks):
    with pytest.raises(ZooError, match="is a folder, not a regular file"):
        read_limited(tmp_path, 100, "checkpoint")
    with pytest.raises(ZooError, match="is a device, not a regular file"):
        read_limited(Path("/dev/zero"), 100, "checkpoint")


def test_without_a_checksum_the_error_never_shows_the_files_bytes(zoo, tmp_path, use_registry):
    """A checkpoint (inside the folder) that is really a password file: the
    message must not leak its first 8 bytes, as text or as a header length."""
    folder = tmp_path / "catalogue"
    registry = hostile_variant(folder, "leak", checkpoint__path="checkpoints/passwd", checkpoint__sha256=None)
    (folder / "checkpoints" / "passwd").write_bytes(SECRET * 3)
    use_registry(registry)
    result = zoo("load", "leak")
    _one_line_error(result, "passwd: not a safetensors file (its header length does not fit the file's 96 bytes)")
    _never_echoes(result.err)
