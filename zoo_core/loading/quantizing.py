"""``--quantize int8``: a loaded network's linear layers in 8-bit integers, for CPU decoding.

Decoding one token at a time reads every weight once per token, so it runs at the
speed the memory hands weights over: int8 weights are a quarter of float32's bytes.
torch's own dynamic quantization (fbgemm) keeps each output channel's int8 weights
with a scale of their own and quantizes each input row as it comes; on this
project's 2-core CPU it ran the 135M SmolLM2's matrix-vector products about four
times as fast as float32, where torchao's weight-only int8 ran slower than float32
(docs/benchmarks.md, "SmolLM2-135M"). Embeddings and norms stay float32.

fbgemm quantizes its whole input with one scale, so a token's logits would depend
on the other tokens in the call: a prompt read at once would differ from one read
token by token, and a row of a batch from the same row sampled alone. Each row
(token) is therefore quantized on its own: decoding one token is one call as
before, and a row's numbers never depend on what it is computed beside.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.ao.nn.quantized import dynamic
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

from ..errors import ZooError

QUANTIZE_KINDS = ("int8",)


class RowByRowInt8Linear(dynamic.Linear):
    """torch's dynamic int8 linear, each row of the input quantized with a scale of its own."""

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] == 1:
            return super().forward(x)
        return torch.cat([super(RowByRowInt8Linear, self).forward(row) for row in rows.split(1)]).view(
            *x.shape[:-1], -1
        )


def check_quantize(quantize: str | None, name: str, device: torch.device, dtype: torch.dtype | None) -> None:
    """Refuse, before anything is loaded, what int8 cannot apply to."""
    if quantize is None:
        return
    if quantize not in QUANTIZE_KINDS:
        raise ZooError(f"unknown quantization '{quantize}' (known: {', '.join(QUANTIZE_KINDS)})")
    if device.type != "cpu":
        raise ZooError(f"variant '{name}': --quantize {quantize} runs on the CPU only, not {device}; drop one of them")
    if dtype not in (None, torch.float32):
        raise ZooError(f"variant '{name}': --quantize {quantize} quantizes float32 weights; drop --dtype or --quantize")


def quantize_network(network: nn.Module, quantize: str, name: str) -> nn.Module:
    """``network`` with its ``nn.Linear`` layers swapped, in place, for int8 ones."""
    if not any(isinstance(module, nn.Linear) for module in network.modules()):
        raise ZooError(f"variant '{name}' has no linear layers for --quantize {quantize} to apply to")
    with warnings.catch_warnings():  # torch.ao says it moves to torchao, whose int8 CPU path is slower here
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return quantize_dynamic(
            network,
            {nn.Linear: per_channel_dynamic_qconfig},
            dtype=torch.qint8,
            mapping={nn.Linear: RowByRowInt8Linear},
            inplace=True,
        )
