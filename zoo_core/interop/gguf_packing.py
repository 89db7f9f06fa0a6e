"""A GGUF import that keeps each quantised matrix's blocks (zoo_core.loading.ggml_blocks).

A family record reads llama.cpp's tensors through the ``dequantize`` callable
it is given, and may permute rows (each RoPE head's query and key rows) or join
matrices row-wise (query, key and value into one). `RowPacking.read` hands it,
for a quantised matrix, its rows of blocks as uint8 — each row led by a small
tag (the type's code and the row's length in values) and padded to the width
of the widest type of that row length in the file — so that permuting and
joining rows work as on floats and every row still says what it is.
`RowPacking.settle` then turns each result back into plain blocks with one type,
or, where a join mixed types, into float32 values (exactly the float import's),
one tensor at a time as the import streams them (zoo_core.interop.deferred_tensors).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, Callable

import gguf
import numpy as np
import torch

from ..errors import ZooError, printable
from ..loading.ggml_blocks import PACKED_TYPES, dequantize_rows, packed_type, row_bytes
from .gguf_files import GGUFHeader

TAG_BYTES = 5  # the type's code (1 byte), then the row's length in values (uint32, little-endian)
Q = gguf.GGMLQuantizationType
# Float matrices are tagged too where quantised ones share their row length: a record may join them.
TAGGED = PACKED_TYPES | {Q.F32, Q.F16, Q.BF16}


class RowPacking:
    def __init__(self, source: Path, header: GGUFHeader, dequantized: Callable[[Any], torch.Tensor]):
        self.source, self.dequantized = source, dequantized
        self.widths: dict[int, int] = {}  # row length in values -> the widest tagged row of that length
        matrices = [t for t in header.tensors if len(t.dims) == 2 and t.type in TAGGED]
        quantised = {t.dims[0] for t in matrices if t.type in PACKED_TYPES}
        for tensor in matrices:
            values = tensor.dims[0]
            if values in quantised:
                self.widths[values] = max(self.widths.get(values, 0), _row_bytes(tensor.type, values))

    def tagged(self, tensor) -> bool:
        """Whether `read` gives the tensor as tagged rows of blocks (else as float32 values)."""
        kind = gguf.GGMLQuantizationType(tensor.tensor_type)
        return kind in TAGGED and len(tensor.shape) == 2 and int(tensor.shape[0]) in self.widths

    def tagged_shape(self, tensor) -> tuple[int, int]:
        """The shape of `read`'s rows for a tensor it tags."""
        values, rows = (int(d) for d in tensor.shape)
        return rows, TAG_BYTES + self.widths[values]

    def read(self, tensor) -> torch.Tensor:
        """The reader's tensor as tagged rows of blocks; plain floats for any other tensor."""
        if not self.tagged(tensor):
            return self.dequantized(tensor)
        kind = gguf.GGMLQuantizationType(tensor.tensor_type)
        values, rows = (int(d) for d in tensor.shape)
        width = _row_bytes(kind, values)
        tagged = np.zeros(self.tagged_shape(tensor), dtype=np.uint8)
        tagged[:, :TAG_BYTES] = np.frombuffer(struct.pack("<BI", int(kind), values), dtype=np.uint8)
        tagged[:, TAG_BYTES : TAG_BYTES + width] = np.asarray(tensor.data).view(np.uint8).reshape(rows, width)
        return torch.from_numpy(tagged)

    def settle(self, name: str, tagged: torch.Tensor) -> tuple[torch.Tensor, str | None]:
        """One tagged result as its blocks and their type, or as float32 values (and None)
        where its rows' types differ or are floats."""
        if tagged.dim() != 2 or tagged.shape[1] < TAG_BYTES:
            raise ZooError(
                f"{self.source}: tensor '{printable(name)}' was reshaped by its family's reader in a way its "
                "quantised blocks cannot follow; import it with --dequantize"
            )
        tags = tagged[:, :TAG_BYTES].contiguous()
        kinds = [(_tagged_type(self.source, name, code), values) for code, values in _distinct(tags)]
        if len(kinds) == 1 and kinds[0][0] in PACKED_TYPES:
            kind, values = kinds[0]
            return tagged[:, TAG_BYTES : TAG_BYTES + row_bytes(kind, values)].contiguous(), kind.name
        # float rows, or rows of several types joined into one matrix: float32, as the float import has them
        out = torch.empty(tagged.shape[0], kinds[0][1], dtype=torch.float32)
        for kind, values in kinds:
            if values != kinds[0][1]:
                raise ZooError(f"{self.source}: tensor '{printable(name)}' joins rows of different lengths")
            mask = (tags == tags.new_tensor(list(struct.pack("<BI", int(kind), values)))).all(dim=1)
            out[mask] = dequantize_rows(tagged[mask, TAG_BYTES : TAG_BYTES + _row_bytes(kind, values)], kind)
        return out, None


def _row_bytes(kind: gguf.GGMLQuantizationType, values: int) -> int:
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return values // block * size


def _tagged_type(source: Path, name: str, code: int) -> gguf.GGMLQuantizationType:
    try:
        kind = gguf.GGMLQuantizationType(code)
    except ValueError:
        kind = None
    if kind not in TAGGED:
        raise ZooError(
            f"{source}: tensor '{printable(name)}' was changed by its family's reader in a way its "
            "quantised blocks cannot follow; import it with --dequantize"
        )
    return kind


def _distinct(tags: torch.Tensor) -> list[tuple[int, int]]:
    return [struct.unpack("<BI", bytes(row.tolist())) for row in torch.unique(tags, dim=0)]


def without_tied_heads(tensors: dict[str, torch.Tensor], types: dict[str, str]) -> dict[str, torch.Tensor]:
    """``tensors`` less every second name of one tensor (a head tied to the
    embedding, packed or float): the checkpoint stores it once, and loading ties the head again."""
    seen, kept = set(), {}
    for name, tensor in tensors.items():
        if id(tensor) in seen:
            types.pop(name, None)
            continue
        seen.add(id(tensor))
        kept[name] = tensor
    return kept


def value_shaped(tensors: dict[str, torch.Tensor], types: dict[str, str]) -> dict[str, torch.Tensor]:
    """``tensors`` with each packed one stood for by an empty (meta) tensor of its values' shape."""
    shaped = dict(tensors)
    for name in types:
        block, size = gguf.GGML_QUANT_SIZES[packed_type(types[name])]
        rows, width = tensors[name].shape
        shaped[name] = torch.empty(rows, width // size * block, device="meta")
    return shaped


def logical_values(tensors: dict[str, torch.Tensor], types: dict[str, str]) -> int:
    """The values the tensors hold, a packed matrix counted by its values, a shared tensor once."""
    seen, total = set(), 0
    for name, tensor in tensors.items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        if name in types:
            block, size = gguf.GGML_QUANT_SIZES[packed_type(types[name])]
            total += tensor.shape[0] * (tensor.shape[1] // size * block)
        else:
            total += tensor.numel()
    return total
