"""Safetensors checkpoints: written atomically, verified before use, never pickled.

A checkpoint is verified in the order that gives the most useful message: the
file exists, its sha256 is the registry's, it parses as safetensors, and its
tensor names and shapes are exactly those of the model built from the card.
Header reading needs no torch, so listing stays fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ZooError
from .files import atomic_write

CARD_KEY = "zoo.card"
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit; a larger claim is hostile


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file, read without torch and bounded in size."""
    try:
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            size = os.fstat(handle.fileno()).st_size
            length = _header_length(path, prefix, size)
            return _parse_header(path, handle.read(length))
    except FileNotFoundError:
        raise ZooError(f"{path}: checkpoint file not found") from None


def _header_length(path: Path, prefix: bytes, size: int) -> int:
    if len(prefix) < 8:
        raise ZooError(f"{path}: not a safetensors file (only {size} bytes)")
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER_BYTES or 8 + length > size:
        raise ZooError(f"{path}: not a safetensors file (header claims {length} bytes, file has {size})")
    return length


def _parse_header(path: Path, data: bytes) -> dict[str, Any]:
    try:
        header = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ZooError(f"{path}: not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise ZooError(f"{path}: not a safetensors file (header is not a JSON object)")
    return header


def header_card(path: Path) -> dict[str, Any] | None:
    metadata = read_header(path).get("__metadata__") or {}
    text = metadata.get(CARD_KEY)
    return json.loads(text) if text else None


def save_checkpoint(path: Path, state_dict: dict, card_header: dict[str, Any]) -> str:
    """Write weights (and the card, in the header) atomically; return the file's sha256."""
    from safetensors.torch import save_file

    tensors = {name: tensor.detach().contiguous().cpu() for name, tensor in state_dict.items()}
    metadata = {CARD_KEY: json.dumps(card_header, sort_keys=True)}
    atomic_write(path, lambda temporary: save_file(tensors, str(temporary), metadata=metadata))
    return sha256_file(path)


@dataclass
class Verification:
    """What loading checked, for `zoo load` to report."""

    path: Path
    sha256: str
    tensors: int
    parameters: int
    checks: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _shape_report(path: Path, expected: dict[str, tuple], found: dict[str, tuple]) -> str | None:
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong = [f"{n} {list(found[n])} (model needs {list(expected[n])})" for n in sorted(set(expected) & set(found)) if expected[n] != found[n]]
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing)}")
    if unexpected:
        parts.append(f"unexpected {', '.join(unexpected)}")
    if wrong:
        parts.append(f"wrong shape {'; '.join(wrong)}")
    return f"{path}: tensors do not match the model: " + "; ".join(parts) if parts else None


def load_verified(path: Path, expected_sha256: str | None, model, expected_parameters: int | None) -> Verification:
    """Load weights into ``model`` after checking them; raise ZooError naming what differs."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load

    started = time.perf_counter()
    checks = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ZooError(f"{path}: checkpoint file not found") from None
    actual = hashlib.sha256(raw).hexdigest()
    if expected_sha256 is not None:
        if actual != expected_sha256:
            raise ZooError(f"{path}: sha256 mismatch: registry has {expected_sha256[:16]}…, file has {actual[:16]}… (corrupted or replaced)")
        checks.append("sha256")
    read_header_from_bytes(path, raw)
    try:
        tensors = load(raw)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise ZooError(f"{path}: not a valid safetensors file: {exc}") from None
    target = model.state_dict()
    problem = _shape_report(path, {n: tuple(t.shape) for n, t in target.items()}, {n: tuple(t.shape) for n, t in tensors.items()})
    if problem:
        raise ZooError(problem)
    checks.append("names")
    checks.append("shapes")
    for name, tensor in tensors.items():
        wanted = target[name].dtype
        if tensor.dtype != wanted and not (tensor.dtype.is_floating_point and wanted.is_floating_point):
            raise ZooError(f"{path}: tensor {name} is {tensor.dtype}, the model needs {wanted}")
    with torch.no_grad():
        model.load_state_dict(tensors, strict=True)  # float storage (e.g. bf16) is cast on copy
    parameters = sum(p.numel() for p in model.parameters())
    if expected_parameters is not None:
        if parameters != expected_parameters:
            raise ZooError(f"{path}: the card says {expected_parameters:,} parameters, the built model has {parameters:,}")
        checks.append("parameters")
    return Verification(path, actual, len(tensors), parameters, checks, time.perf_counter() - started)


def read_header_from_bytes(path: Path, raw: bytes) -> dict[str, Any]:
    """Bounds-check the header of an in-memory file before handing it to safetensors."""
    length = _header_length(path, raw[:8], len(raw))
    return _parse_header(path, raw[8 : 8 + length])
