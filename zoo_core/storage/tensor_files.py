"""Writing safetensors files straight from the tensors' memory.

`safetensors.torch.save` serializes into a buffer and copies that into a bytes
object: while both exist, the weights (and, for a training state, the optimizer's
moments) are held three times. A 10 M-parameter model's training state is about
120 MB; saving it every few hundred steps took 250 MB more than training did.
Here the header is built in Python and each tensor's bytes go to the file from
the tensor itself, through `zoo_core.storage.files` (atomic, every OS error one line):
nothing is held twice.

The file is byte for byte what safetensors writes (tensors ordered by dtype,
widest first, then by name; the header padded with spaces to 8 bytes), so a
checkpoint's sha256 does not depend on which writer made it (metadata keys are
sorted; safetensors' order of several keys varies between processes, and the
zoo writes one);
`tests/test_speed_paths.py` compares the two on every dtype the zoo uses.
Where this layout is not known (an exotic dtype, a big-endian machine) the
safetensors library writes the bytes instead.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch
from safetensors.torch import save

from ..errors import ZooError
from .files import atomic_write, content_named, describe_os_error, write_chunks

# safetensors' dtypes in the order of its Rust enum: files list tensors of the
# later (wider) types first.
_DTYPES = {
    torch.bool: "BOOL",
    torch.uint8: "U8",
    torch.int8: "I8",
    torch.int16: "I16",
    torch.uint16: "U16",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int32: "I32",
    torch.uint32: "U32",
    torch.float32: "F32",
    torch.float64: "F64",
    torch.int64: "I64",
    torch.uint64: "U64",
}
_RANK = {code: rank for rank, code in enumerate(_DTYPES.values())}
DTYPE_OF_CODE = {code: dtype for dtype, code in _DTYPES.items()}  # "F32" -> torch.float32


def _check_unshared(tensors: dict[str, torch.Tensor]) -> None:
    owners: dict[int, str] = {}
    for name, tensor in tensors.items():
        storage = tensor.untyped_storage()
        if storage.nbytes() and storage.data_ptr() in owners:  # safetensors refuses this too
            raise ZooError(
                f"tensors '{owners[storage.data_ptr()]}' and '{name}' share memory; "
                "save one of them and tie them again after loading"
            )
        owners[storage.data_ptr()] = name


def _pieces(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Iterator[memoryview | bytes]:
    """The file: its length-prefixed header, then every tensor's bytes in the header's order."""
    ordered = sorted(tensors.items(), key=lambda item: (-_RANK[_DTYPES[item[1].dtype]], item[0]))
    header: dict[str, object] = {"__metadata__": dict(sorted(metadata.items()))} if metadata else {}
    offset = 0
    for name, tensor in ordered:
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    yield struct.pack("<Q", len(text)) + text
    for _, tensor in ordered:
        yield tensor.reshape(-1).view(torch.uint8).numpy().data  # the tensor's own memory, not a copy


def write_safetensors(
    path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str], *, by_content: bool = False
) -> str:
    """Write ``tensors`` (any device; contiguous copies are made on the CPU only
    where needed) with ``metadata`` to ``path`` atomically; return the file's sha256.
    With ``by_content`` the file is named ``content_named(path, sha256)`` instead,
    so it never replaces a file of other content (see zoo_core.catalogue.publishing)."""
    tensors = {name: tensor.detach().contiguous().cpu() for name, tensor in tensors.items()}
    _check_unshared(tensors)
    digest = hashlib.sha256()
    if sys.byteorder == "little" and all(tensor.dtype in _DTYPES for tensor in tensors.values()):
        pieces = _pieces(tensors, metadata)
    else:
        pieces = iter([save(tensors, metadata=metadata)])

    def hashed():
        for piece in pieces:
            digest.update(piece)
            yield piece

    named = (lambda: content_named(path, digest.hexdigest())) if by_content else None
    atomic_write(path, lambda temporary: write_chunks(temporary, hashed()), named=named)
    return digest.hexdigest()


SPILL_ALIGNMENT = 64  # each spilled tensor starts on a boundary any dtype's view can take


def spilled(tensors: Iterable[tuple[str, torch.Tensor]], path: Path) -> dict[str, torch.Tensor]:
    """Write each tensor's bytes to the scratch file ``path`` as it comes (the next is
    made only after this one is written and let go), then give every one back
    memory-mapped from there: copy-on-write, their pages the file's, each in a map of
    its own (distinct storages, as safetensors wants). What a streaming import holds
    between making a network's tensors one at a time and writing its checkpoint."""
    placed: dict[str, tuple[int, torch.dtype, tuple[int, ...]]] = {}
    try:
        with open(path, "wb") as handle:
            for name, tensor in tensors:
                handle.write(b"\0" * (-handle.tell() % SPILL_ALIGNMENT))
                placed[name] = (handle.tell(), tensor.dtype, tuple(tensor.shape))
                handle.write(tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().data)
                del tensor
    except OSError as exc:
        raise ZooError(f"{path}: cannot write scratch tensors: {describe_os_error(exc)}") from None
    mapped = {}
    for name, (offset, dtype, shape) in placed.items():
        size = math.prod(shape) * dtype.itemsize
        raw = np.memmap(path, dtype=np.uint8, mode="c", offset=offset, shape=(size,))
        mapped[name] = torch.from_numpy(raw).view(dtype).reshape(shape)
    return mapped
