"""The weights of a transformers folder: `model.safetensors`, or the shards that
`model.safetensors.index.json` names (how `save_pretrained` writes a model larger
than its `max_shard_size`, and how most real models are published).

The index maps every tensor name to the shard that holds it. The shards are read
only as files beside the index (a name with a folder in it is refused), and the
tensors they hold must be exactly those the index maps, each in the shard it names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..errors import ZooError, printable
from ..storage.files import read_limited

WEIGHTS = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"
INDEX_LIMIT = 64 << 20  # a 1,000-layer model's index is a few megabytes


def weights_in(folder: Path) -> Path | None:
    """The folder's weights: model.safetensors, else its shards' index; None when it has neither."""
    for name in (WEIGHTS, SHARD_INDEX):
        if (folder / name).exists():
            return folder / name
    return None


def _weight_map(index: Path) -> dict[str, str]:
    try:
        mapping = json.loads(read_limited(index, INDEX_LIMIT, "shard index")).get("weight_map")
    except (ValueError, AttributeError):
        mapping = None
    if not isinstance(mapping, dict) or not mapping or not all(isinstance(v, str) for v in mapping.values()):
        raise ZooError(f"{index}: not a shard index (a JSON object whose weight_map names each tensor's file)")
    return mapping


def weight_files(weights: Path) -> list[Path]:
    """The safetensors files behind ``weights``: itself, or each shard its index names, once."""
    if weights.name != SHARD_INDEX:
        return [weights]
    shards = sorted(set(_weight_map(weights).values()))
    for shard in shards:
        if Path(shard).name != shard or shard in ("", ".", ".."):
            raise ZooError(f"{weights}: shard {printable(shard)!r} is not a file beside the index")
    return [weights.parent / shard for shard in shards]


def read_tensors(weights: Path, on_file: Callable[[], None] = lambda: None) -> dict[str, torch.Tensor]:
    """Every tensor of the file, or of the shards, checked against the index;
    ``on_file()`` after each file is read (a progress bar's count)."""
    mapping = _weight_map(weights) if weights.name == SHARD_INDEX else None
    tensors: dict[str, torch.Tensor] = {}
    for path in weight_files(weights):
        try:
            found = load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            shown = printable(str(path), None)
            raise ZooError(f"{shown}: not a valid safetensors file: {printable(' '.join(str(exc).split()))}") from None
        if mapping is not None:
            misplaced = sorted(name for name in found if mapping.get(name) != path.name)
            if misplaced:
                raise ZooError(
                    f"{path}: holds tensor {printable(misplaced[0])!r}, which {SHARD_INDEX} does not put there"
                )
        tensors.update(found)
        on_file()
    if mapping is not None and set(mapping) != set(tensors):
        missing = sorted(set(mapping) - set(tensors))[0]
        raise ZooError(f"{weights}: names tensor {printable(missing)!r}, which its shard does not hold")
    return tensors
