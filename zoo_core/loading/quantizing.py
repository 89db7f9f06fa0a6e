"""``--quantize int8``: a loaded network's linear layers as llama.cpp's Q8_0 blocks, for CPU decoding.

Decoding one token at a time reads every weight once per token, so it runs at the
speed the memory hands weights over: Q8_0 keeps 8-bit integers with one float16
scale per 32 values, 34 bytes where float32 takes 128. Each linear layer whose rows
are whole 32-value blocks is quantised at load by the `gguf` package's own
`gguf.quants.quantize` and becomes a `PackedLinear` (zoo_core.loading.packed_modules),
the very layer a GGUF import's Q8_0 matrices load into: a token's product goes
through the project's C kernel (its activations rounded to 8 bits per block, as
llama.cpp rounds them). Embeddings, norms and other layers stay float32. This
replaces torch.ao's deprecated dynamic int8 quantisation. The blocks are the gguf
package's, an extra: without it `--quantize` is refused in one line, here, and the
swap itself (`quantize_network`) lives beside the packed layers.

It quantises again at every load; `zoo quantize NAME --to q8_0 --name NEW` saves the
blocks once (zoo_core.interop.gguf_quantize), and the variant then loads by mapping.
"""

from __future__ import annotations

import importlib.util

import torch

from ..errors import ZooError

QUANTIZE_KINDS = ("int8",)


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
    if importlib.util.find_spec("gguf") is None:
        raise ZooError(
            f"--quantize {quantize} keeps llama.cpp's Q8_0 blocks and needs its gguf package: pip install 'zoo-lm[gguf]'"
        )
