"""Loading gpt-char's weights: safetensors against torch.load of the same tensors.

Both paths end with the weights in a built model (load_state_dict included).
The zoo's full verified load, which also hashes the file (sha256) and checks
names and shapes, is reported beside them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from benchmarks.common import best_of, zoo_network
from zoo_core.storage.checkpoints import load_verified, sha256_file

REPEATS = 7


def run() -> dict:
    model, _ = zoo_network("gpt-char")
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    with tempfile.TemporaryDirectory() as folder:
        safetensors_path, pickle_path = Path(folder) / "w.safetensors", Path(folder) / "w.pt"
        save_file(state, str(safetensors_path))
        torch.save(state, pickle_path)
        target, _ = zoo_network("gpt-char", seed=1)
        times = {
            "safetensors": best_of(REPEATS, lambda: target.load_state_dict(load_file(str(safetensors_path)))),
            "torch_load": best_of(REPEATS, lambda: target.load_state_dict(torch.load(pickle_path, weights_only=True))),
        }
        sha = sha256_file(safetensors_path)
        times["zoo_verified"] = best_of(REPEATS, lambda: load_verified(safetensors_path, sha, target, None))
        size = safetensors_path.stat().st_size
    return {
        "megabytes": size / 1e6,
        **{f"{name}_ms": seconds * 1000 for name, seconds in times.items()},
        "torch_load_over_safetensors": times["torch_load"] / times["safetensors"],
    }


if __name__ == "__main__":
    print(run())
