"""`zoo quantize NAME --to q8_0 --name NEW`: a float variant quantised once, saved packed.

Each linear layer's and embedding's weight whose rows are whole 32-value blocks
becomes llama.cpp's blocks of the type asked, quantised by the `gguf` package's
own `gguf.quants.quantize` (the types it can quantise: Q8_0, Q4_0, Q4_1, Q5_0,
Q5_1), and is kept as a GGUF import keeps a file's (zoo_core.loading.packed_modules):
loading maps it and decoding multiplies the blocks, with nothing quantised
again at load. Norms, biases and other rows stay float32; a head tied to the
embedding is stored once.
"""

from __future__ import annotations

import json

import gguf
import torch
from torch import nn

from ..errors import ZooError
from ..loading.api import load
from ..loading.ggml_blocks import quantize_rows
from ..loading.packed_modules import PACKED_KEY
from ..storage.user_catalogue import add_user_variant
from .imports import check_name_is_free

Q = gguf.GGMLQuantizationType
TARGETS = {"q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1, "q5_0": Q.Q5_0, "q5_1": Q.Q5_1}


def quantize_variant(name: str, to: str, new_name: str, replace: bool = False):
    """Save variant ``name``'s weights quantised to ``to`` as the user's variant
    ``new_name``; returns its card and the registry it went to."""
    kind = TARGETS.get(to)
    if kind is None:
        raise ZooError(f"--to {to}: the types the gguf package quantises are {', '.join(TARGETS)}")
    check_name_is_free(new_name, replace)
    model = load(name)
    if model.card.adapter is not None:
        raise ZooError(f"variant '{name}' is an adapter; merge it first (zoo merge), then quantize the merged variant")
    network = model.network
    if any(buffer.dtype == torch.uint8 for buffer in network.buffers()):
        raise ZooError(f"variant '{name}' is quantised already; quantize its float32 import (--dequantize) instead")
    tensors = dict(network.state_dict())
    types = {}
    packed_ids = set()
    for owner, module in network.named_modules():
        if not isinstance(module, (nn.Linear, nn.Embedding)) or module.weight.shape[1] % 32:
            continue
        key = f"{owner}.weight"
        if id(module.weight) in packed_ids:  # a head tied to the embedding: saved once, tied again at load
            tensors.pop(key, None)
            continue
        tensors[key] = quantize_rows(module.weight, kind)
        types[key] = kind.name
        packed_ids.add(id(module.weight))
    if not types:
        raise ZooError(f"variant '{name}' has no linear layer with rows of whole 32-value blocks to quantize")
    card = model.card.model_copy(deep=True, update={"name": new_name, "tags": [*model.card.tags, f"gguf-{to}"]})
    # Said where the card tells the weights' history: its import, else its training recipe.
    told = card.imported if card.imported is not None else card.recipe
    if told is not None:
        told.notes = "; ".join(filter(None, [told.notes, f"quantised to {kind.name} from {name} by zoo quantize"]))
    # parameters shared by two names (tied) were popped above or are one float tensor: clone the rest
    tensors = {key: tensor.detach().clone() for key, tensor in tensors.items()}
    registry = add_user_variant(
        card, tensors, model.variant.tokenizer_path, metadata={PACKED_KEY: json.dumps(types, sort_keys=True)}
    )
    return card, registry
