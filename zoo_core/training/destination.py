"""What a run checks about where it will write, before any training time is spent.

A read-only or full destination used to surface only when the first training
state was saved, or after the whole run; both are known before the first step.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..errors import ZooError
from ..storage.files import describe_os_error, make_folder


def check_destination(
    folders: list[Path], weight_bytes: int, keeps_state: bool, trained_bytes: int | None = None
) -> None:
    """Each of ``folders`` (created if missing) takes a new file, and the first
    (the checkpoint's) has room for the run's files: the checkpoint and, when
    ``keeps_state``, a training state twice over (the old one stays until its
    replacement is complete). A state holds the weights, the best weights so far
    and the optimizer's two moments (Adam-like) of the ``trained_bytes`` that
    train (all the weights unless said: a LoRA's adapters alone). One ZooError line otherwise."""
    for folder in dict.fromkeys(folders):
        try:
            make_folder(folder)
        except ZooError as exc:
            raise ZooError(f"{exc} (nothing was trained)") from None
        try:  # the real test: permission bits do not tell root, ACLs or a read-only mount apart
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            raise ZooError(
                f"{folder}: cannot write the run's files here: {describe_os_error(exc)} "
                f"(nothing was trained; choose another --out, or fix the folder)"
            ) from None
    state = 2 * weight_bytes + 2 * (weight_bytes if trained_bytes is None else trained_bytes)
    need = weight_bytes + (2 * state if keeps_state else 0)
    try:
        free = shutil.disk_usage(folders[0]).free
    except OSError:
        return  # a file system that does not say: the writes themselves will tell
    if free < need:
        raise ZooError(
            f"{folders[0]}: {_size(free)} free, the run needs about {_size(need)} "
            f"(checkpoint {_size(weight_bytes)}"
            + (f", training states {_size(need - weight_bytes)}" if keeps_state else "")
            + "); nothing was trained: free some space, or choose another --out (--checkpoint-every 0 keeps no state)"
        )


def weight_bytes(network) -> int:
    """The bytes of the network's saved weights (its state dict)."""
    return sum(tensor.numel() * tensor.element_size() for tensor in network.state_dict().values())


def trained_bytes(network) -> int:
    """The bytes of the weights that train (the optimizer keeps two moments of each)."""
    return sum(p.numel() * p.element_size() for p in network.parameters() if p.requires_grad)


def _size(count: int) -> str:
    if count < 1024:
        return f"{count:,} bytes"
    scaled, unit = float(count), "bytes"
    for unit in ("KiB", "MiB", "GiB"):
        scaled /= 1024
        if scaled < 1024:
            break
    return f"{scaled:,.1f} {unit}"
