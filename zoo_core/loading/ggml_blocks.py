"""llama.cpp's quantised blocks, kept as the GGUF file gives them, read in torch.

A quantised GGUF matrix is a list of rows, each row a run of fixed-size
blocks (ggml's block_q*_* structs: a float16 scale, perhaps a float16 minimum,
then the packed integers). A block never spans two rows, so a row of the
matrix is a row of bytes: ``[rows, row_bytes]`` uint8 holds exactly the file's
bits, and permuting, selecting or joining rows in that form changes no value.

`dequantize_rows` turns such rows into float32 values equal, bit for bit, to
the `gguf` package's own `gguf.quants.dequantize` (the importer's float32 path):
the five classic types in torch (the same float32 operations in the same
order), the K-quants through the package itself.
"""

from __future__ import annotations

import gguf
import numpy as np
import torch

from ..errors import ZooError

Q = gguf.GGMLQuantizationType
# The types whose blocks the zoo keeps (F32, F16 and BF16 are plain floats already).
PACKED_TYPES = frozenset({Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K})
_BY_NAME = {kind.name: kind for kind in PACKED_TYPES}


def packed_type(name: str) -> gguf.GGMLQuantizationType:
    """The type a checkpoint names ("Q4_1"), or one line why not."""
    kind = _BY_NAME.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ZooError(f"quantised type {name!r} is not one the zoo keeps ({', '.join(sorted(_BY_NAME))})")
    return kind


def row_bytes(kind: gguf.GGMLQuantizationType, values: int) -> int:
    """Bytes of one row of ``values`` values; refused when blocks do not tile it."""
    block, size = gguf.GGML_QUANT_SIZES[kind]
    if values % block:
        raise ZooError(f"rows of {values} values do not fill {kind.name}'s {block}-value blocks")
    return values // block * size


def _scale(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """The float16 at byte ``at`` of every block, widened to float32: shape [..., 1]."""
    return blocks[..., at : at + 2].contiguous().view(torch.float16).float()


def _nibbles(quants: torch.Tensor) -> torch.Tensor:
    """A block's 16 bytes as its 32 four-bit values: the low halves first, then the high."""
    return torch.cat((quants & 0x0F, quants >> 4), dim=-1)


def _fifth_bits(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """Q5's 32 high bits (a little-endian uint32 at byte ``at``), one per value, shifted to bit 4."""
    high = blocks[..., at : at + 4].to(torch.int64)
    word = high[..., 0] | high[..., 1] << 8 | high[..., 2] << 16 | high[..., 3] << 24
    shifts = torch.arange(32, dtype=torch.int64)
    return (((word.unsqueeze(-1) >> shifts) & 1) << 4).to(torch.uint8)


def _q8_0(b):
    return b[..., 2:].contiguous().view(torch.int8).float() * _scale(b, 0)


def _q4_0(b):
    return _scale(b, 0) * (_nibbles(b[..., 2:]).to(torch.int8) - 8).float()


def _q4_1(b):
    return _scale(b, 0) * _nibbles(b[..., 4:]).float() + _scale(b, 2)


def _q5_0(b):
    return _scale(b, 0) * ((_nibbles(b[..., 6:]) | _fifth_bits(b, 2)).to(torch.int8) - 16).float()


def _q5_1(b):
    return _scale(b, 0) * (_nibbles(b[..., 8:]) | _fifth_bits(b, 4)).float() + _scale(b, 2)


_TORCH = {Q.Q8_0: _q8_0, Q.Q4_0: _q4_0, Q.Q4_1: _q4_1, Q.Q5_0: _q5_0, Q.Q5_1: _q5_1}


def dequantize_rows(rows: torch.Tensor, kind: gguf.GGMLQuantizationType) -> torch.Tensor:
    """``rows`` ([..., row_bytes] uint8 blocks of type ``kind``) as float32 [..., values]."""
    block, size = gguf.GGML_QUANT_SIZES[kind]
    lead, width = rows.shape[:-1], rows.shape[-1]
    values = width // size * block
    convert = _TORCH.get(kind)
    if convert is not None:
        return convert(rows.reshape(*lead, width // size, size)).reshape(*lead, values)
    # K-quants: the package's numpy code (it copies; the rows asked for are what is copied)
    array = np.ascontiguousarray(rows.reshape(-1, width).numpy())
    return torch.from_numpy(np.asarray(gguf.quants.dequantize(array, kind), dtype=np.float32)).reshape(*lead, values)


def quantize_rows(weight: torch.Tensor, kind: gguf.GGMLQuantizationType) -> torch.Tensor:
    """``weight``'s rows (whole blocks of ``kind``) as uint8 blocks, by the gguf package's own quantiser."""
    values = weight.detach().float().contiguous().numpy()
    return torch.from_numpy(np.ascontiguousarray(gguf.quants.quantize(values, kind)))
