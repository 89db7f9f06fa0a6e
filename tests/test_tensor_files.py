"""Safetensors files written from the tensors' memory (zoo_core.storage.tensor_files):
the same bytes as the safetensors library's, without holding a second copy."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save

from zoo_core.errors import ZooError
from zoo_core.storage.checkpoints import sha256_file
from zoo_core.storage.tensor_files import write_safetensors

from .conftest import ROOT

# One key, as every file the zoo writes: with several, safetensors' order of them varies between processes.
METADATA = {"zoo.card": '{"name": "x", "description": "naïve \\"quoted\\" — café\\n"}'}


def _every_dtype() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for index, dtype in enumerate([torch.bool, torch.uint8, torch.int8, torch.int16, torch.uint16, torch.float16,
                                   torch.bfloat16, torch.int32, torch.uint32, torch.float32, torch.float64,
                                   torch.int64, torch.uint64]):
        values = torch.randint(0, 100, (3, index + 1), generator=generator)
        tensors[f"t{12 - index:02d}.{dtype}".replace("torch.", "")] = values.to(dtype) if dtype != torch.bool else values > 50
    tensors["scalar"] = torch.tensor(3.5)
    tensors["empty"] = torch.zeros(0, 4)
    return tensors


def test_the_file_is_byte_for_byte_what_safetensors_writes(tmp_path):
    tensors = _every_dtype()
    path = tmp_path / "all.safetensors"
    sha = write_safetensors(path, tensors, METADATA)
    assert path.read_bytes() == save(tensors, metadata=METADATA)
    assert sha == sha256_file(path)
    loaded = load_file(path)
    assert all(torch.equal(loaded[name], tensor) for name, tensor in tensors.items())


def test_a_dtype_without_a_known_layout_is_written_by_the_library(tmp_path):
    tensors = {"f8": torch.zeros(4, dtype=torch.float8_e5m2), "w": torch.ones(2)}
    path = tmp_path / "f8.safetensors"
    write_safetensors(path, tensors, {"k": "v"})
    assert path.read_bytes() == save(tensors, metadata={"k": "v"})


@pytest.mark.parametrize("checkpoint", sorted((ROOT / "checkpoints").glob("*.safetensors")), ids=lambda p: p.stem)
def test_rewriting_a_shipped_checkpoint_reproduces_its_sha256(tmp_path, checkpoint):
    with safe_open(checkpoint, "pt") as handle:
        metadata = handle.metadata() or {}
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    assert write_safetensors(tmp_path / checkpoint.name, tensors, metadata) == sha256_file(checkpoint)


def test_two_names_for_one_memory_are_refused_in_one_line(tmp_path):
    shared = torch.zeros(4)
    with pytest.raises(ZooError, match="tensors 'a' and 'b' share memory"):
        write_safetensors(tmp_path / "x.safetensors", {"a": shared, "b": shared}, {})
    assert list(tmp_path.iterdir()) == []


# The peak is read from /proc (VmHWM), not getrusage: a child forked from a big
# process (pytest, after many tests) keeps the parent's ru_maxrss across exec.
WRITER = textwrap.dedent("""
    import sys, torch
    from pathlib import Path

    def peak():
        return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))

    torch.manual_seed(0)
    tensors = {f"w{i}": torch.randn(4 * 1024 * 1024) for i in range(4)}  # 64 MiB
    before = peak()
    if sys.argv[2] == "zoo":
        from zoo_core.storage.tensor_files import write_safetensors
        write_safetensors(Path(sys.argv[1]), tensors, {"k": "v"})
    else:
        from safetensors.torch import save
        Path(sys.argv[1]).write_bytes(save(tensors, metadata={"k": "v"}))
    print((peak() - before) // 1024)
""")


def test_writing_holds_no_second_copy_of_the_tensors(tmp_path):
    def peak_growth_mb(writer: str) -> int:
        done = subprocess.run([sys.executable, "-c", WRITER, str(tmp_path / f"{writer}.safetensors"), writer],
                              capture_output=True, text=True, check=True, cwd=ROOT)
        return int(done.stdout.split()[-1])

    library, ours = peak_growth_mb("library"), peak_growth_mb("zoo")
    assert library >= 100  # the library's save holds the 64 MiB twice more: the measurement can see a copy
    assert ours <= 16
    assert (tmp_path / "zoo.safetensors").read_bytes() == (tmp_path / "library.safetensors").read_bytes()
