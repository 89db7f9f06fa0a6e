"""Linear layers and embeddings whose weights stay in llama.cpp's quantised blocks.

A GGUF import keeps each quantised matrix as the file gives it
(zoo_core.loading.ggml_blocks): ``[rows, row_bytes]`` uint8, a buffer named
``weight`` like the float layer's, with its type recorded in the checkpoint's
header (`PACKED_KEY`). `pack_modules` swaps a built network's ``nn.Linear`` and
``nn.Embedding`` layers for these before the checkpoint is loaded into it, so
a checkpoint's names stay the float network's and its bytes are the file's.

The product of a token or a few (up to `MAX_TOKENS` rows: decoding, the
batching server's rows) goes through the project's C kernel
(zoo_core.loading.ggml_kernels): each activation row is rounded per block of 32
values to 8-bit integers with one float scale (da = max|x| / 127, as llama.cpp's
Q8_0), and the kernel computes W · x̂, the file's exact weights times the rounded
activations, with integer dot products. That rounding is the only error it adds
to the file's: each activation moves by at most da / 2, so each output moves by
at most Σ_blocks da/2 · Σ|w| over the block (plus float32 reordering), about
1e-3 of Σ|w·x| on random data. More rows of input (a prompt read at once), or
no compiler: the weight is dequantised to the very float32 values of the float
import and multiplied by `F.linear`, equal to it bit for bit. docs/benchmarks.md
("quantized") has the kernels measured against each other on this machine.
A head tied to the embedding holds no weight of its own: it reads the embedding's.
"""

from __future__ import annotations

import json
from typing import Mapping

import gguf
import torch
from torch import nn
from torch.nn import functional as F

from ..errors import ZooError, printable
from ..storage.checkpoints import PACKED_TYPES_KEY
from .ggml_blocks import dequantize_rows, packed_type, quantize_rows, row_bytes
from .ggml_kernels import matvec

PACKED_KEY = PACKED_TYPES_KEY  # checkpoint header: {tensor name: "Q4_1", ...}


class PackedLinear(nn.Module):
    """``nn.Linear`` whose weight is rows of quantised blocks."""

    weight: torch.Tensor

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kind: gguf.GGMLQuantizationType,
        bias: torch.Tensor | None,
        device=None,
    ):
        super().__init__()
        self.in_features, self.out_features, self.kind = in_features, out_features, kind
        self.packed_values = in_features * out_features  # what the parameter count counts
        self.register_buffer("weight", _rows(out_features, row_bytes(kind, in_features), bias, device))
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return packed_linear(x, self.weight, self.kind, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.kind.name}"


class PackedEmbedding(nn.Module):
    """``nn.Embedding`` whose table is rows of quantised blocks: only the rows looked up are dequantised."""

    weight: torch.Tensor

    def __init__(self, num_embeddings: int, embedding_dim: int, kind: gguf.GGMLQuantizationType, device=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.kind = num_embeddings, embedding_dim, kind
        self.packed_values = num_embeddings * embedding_dim
        self.register_buffer(
            "weight", torch.empty(num_embeddings, row_bytes(kind, embedding_dim), dtype=torch.uint8, device=device)
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return dequantize_rows(self.weight[ids], self.kind)


def _rows(rows: int, width: int, like: torch.Tensor | None, device=None) -> torch.Tensor:
    return torch.empty(rows, width, dtype=torch.uint8, device=device if like is None else like.device)


class TiedPackedHead(nn.Module):
    """The output head of a network whose head is its (packed) embedding."""

    def __init__(self, embedding: PackedEmbedding, bias: torch.Tensor | None):
        super().__init__()
        self._embedding = [embedding]  # a list: not a submodule, so its weight is saved once, under its own name
        self.bias = bias

    @property
    def weight(self) -> torch.Tensor:  # the packed rows, for code that reads a head's shape
        return self._embedding[0].weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        embedding = self._embedding[0]
        return packed_linear(x, embedding.weight, embedding.kind, self.bias)


def packed_linear(x: torch.Tensor, rows: torch.Tensor, kind: gguf.GGMLQuantizationType, bias) -> torch.Tensor:
    """``F.linear(x, W, bias)`` for the weight W that ``rows`` hold: the C kernel (activations
    rounded to 8 bits) for up to `MAX_TOKENS` rows (zoo_core.loading.ggml_kernels), else dequantised and BLAS."""
    out = matvec(rows, int(kind), x)
    if out is None:
        return F.linear(x, dequantize_rows(rows, kind), bias)
    return out if bias is None else out + bias


def quantize_network(network: nn.Module, quantize: str, name: str) -> nn.Module:
    """``network`` with its ``nn.Linear`` layers of whole 32-value rows swapped, in place,
    for Q8_0 ones: ``--quantize int8`` (zoo_core.loading.quantizing)."""
    kind = gguf.GGMLQuantizationType.Q8_0
    block = gguf.GGML_QUANT_SIZES[kind][0]
    linears = [(owner, m) for owner, m in network.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ZooError(f"variant '{name}' has no linear layers for --quantize {quantize} to apply to")
    for owner, module in linears:
        if module.in_features % block:
            continue  # its rows are not whole blocks: it stays float32
        packed = PackedLinear(module.in_features, module.out_features, kind, module.bias)
        packed.weight = quantize_rows(module.weight, kind)
        _replace(network, owner, packed)
    return network


def pack_modules(network: nn.Module, types: Mapping[str, str]) -> None:
    """Swap, in place, the layers whose weights ``types`` names ({"blocks.0.attn.qkv.weight": "Q4_1"})
    for packed ones, and a head tied to a packed embedding for a `TiedPackedHead`."""
    embeddings: dict[int, PackedEmbedding] = {}
    ties = []
    for name, type_name in types.items():
        owner, _, attribute = name.rpartition(".")
        module = _submodule(network, owner, name)
        kind = packed_type(type_name)
        if attribute != "weight":
            raise ZooError(f"tensor '{printable(name)}' is kept quantised, but only a layer's weight can be")
        packed: nn.Module
        if isinstance(module, nn.Linear):
            packed = PackedLinear(module.in_features, module.out_features, kind, module.bias, module.weight.device)
        elif isinstance(module, nn.Embedding):
            embedding = PackedEmbedding(module.num_embeddings, module.embedding_dim, kind, module.weight.device)
            embeddings[id(module.weight)] = packed = embedding
        else:
            raise ZooError(f"tensor '{printable(name)}' is kept quantised, but its layer is a {type(module).__name__}")
        _replace(network, owner, packed)
    for owner, module in network.named_modules():
        if isinstance(module, nn.Linear) and id(module.weight) in embeddings:
            ties.append((owner, module))
    for owner, module in ties:
        _replace(network, owner, TiedPackedHead(embeddings[id(module.weight)], module.bias))


def _submodule(network: nn.Module, owner: str, name: str) -> nn.Module:
    try:
        return network.get_submodule(owner)
    except AttributeError:
        raise ZooError(
            f"tensor '{printable(name)}' is kept quantised, but the network has no layer '{printable(owner)}'"
        ) from None


def _replace(network: nn.Module, owner: str, module: nn.Module) -> None:
    parent, _, attribute = owner.rpartition(".")
    setattr(network.get_submodule(parent) if parent else network, attribute, module)


def check_packed_finite(path, name: str, rows: torch.Tensor, type_name: str) -> None:
    """Every value a packed tensor holds is finite (its scales are float16 read from a file)."""
    kind = packed_type(type_name)
    # A few MB of float32 at a time, whatever the row length: 4096 rows of a 7B model's
    # 11008-wide FFN would be 180 MB, and its dequantisation's temporaries several times that.
    block, size = gguf.GGML_QUANT_SIZES[kind]
    step = max(1, (1 << 20) // max(1, rows.shape[-1] // size * block))
    for start in range(0, rows.shape[0], step):
        if not bool(torch.isfinite(dequantize_rows(rows[start : start + step], kind)).all()):
            raise ZooError(f"{path}: tensor {printable(name)} ({type_name} blocks) holds NaN or infinite values")


def header_types(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """The packed tensors a checkpoint header records (none for a float checkpoint)."""
    text = (metadata or {}).get(PACKED_KEY)
    if text is None:
        return {}
    try:
        types = json.loads(text)
    except (TypeError, json.JSONDecodeError):
        raise ZooError(f"the checkpoint's {PACKED_KEY} is not JSON") from None
    if not isinstance(types, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in types.items()):
        raise ZooError(f"the checkpoint's {PACKED_KEY} is not a table of tensor names and types")
    return types
