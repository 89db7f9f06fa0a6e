"""Safetensors checkpoints: written atomically, verified before use, never pickled.

A checkpoint is verified in the order that gives the most useful message: the
file exists, its sha256 is the registry's, it parses as safetensors, and its
tensor names and shapes are exactly those of the model built from the card.
Header reading needs no torch, so listing stays fast.

Hashing and checking every value of a 540 MB checkpoint costs seconds at every
load, so a file that passed every check is remembered (``$ZOO_CACHE/verified``)
by its identity: device, inode, size, modification and change times. The change
time cannot be set back by any user (writing or `touch` moves it to now), so a
file with the same identity is the file that was checked; it is then memory-mapped
and only its names, shapes, types and header card are checked again.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch
from safetensors import SafetensorError
from safetensors.torch import load, load_file

from ..catalogue.card_cache import cache_header_fields, cached_header_fields
from ..catalogue.cards import first_difference
from ..errors import ZooError, printable
from .files import (
    cache_file_for,
    describe_os_error,
    open_regular,
    read_cache_entry,
    read_limited,
    write_cache_entry,
    write_chunks,
)
from .tensor_files import DTYPE_OF_CODE, write_safetensors

if TYPE_CHECKING:
    from ..catalogue.cards import ModelCard

CARD_KEY = "zoo.card"
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit; a larger claim is hostile
# A checkpoint holding a GGUF file's quantised blocks names them here (zoo_core.loading.packed_modules).
PACKED_TYPES_KEY = "zoo.ggml_types"
PACKED_REFUSAL = (
    "the weights are kept as a GGUF file's quantised blocks; training, fine-tuning and exports need "
    "float weights: import the file again with zoo import gguf --dequantize"
)


def sha256_file(path: Path, what: str = "file") -> str:
    digest = hashlib.sha256()
    with open_regular(path, what) as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file, read without torch and bounded in size."""
    try:
        with open_regular(path, "checkpoint") as handle:
            prefix = handle.read(8)
            size = os.fstat(handle.fileno()).st_size
            length = _header_length(path, prefix, size)
            return _parse_header(path, handle.read(length))
    except FileNotFoundError:
        raise ZooError(f"{path}: checkpoint file not found") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read checkpoint: {describe_os_error(exc)}") from None


def _header_length(path: Path, prefix: bytes, size: int) -> int:
    if len(prefix) < 8:
        raise ZooError(f"{path}: not a safetensors file (only {size} bytes)")
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER_BYTES or 8 + length > size:
        # The claimed length is not shown: it is the file's first 8 bytes, and the
        # file may be anything (a password file a hostile card points at).
        raise ZooError(f"{path}: not a safetensors file (its header length does not fit the file's {size} bytes)")
    return length


def _parse_header(path: Path, data: bytes) -> dict[str, Any]:
    try:
        header = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # RecursionError: nested thousands deep
        raise ZooError(f"{path}: not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise ZooError(f"{path}: not a safetensors file (header is not a JSON object)")
    return header


def header_card(path: Path) -> dict[str, Any] | None:
    metadata = read_header(path).get("__metadata__") or {}
    text = metadata.get(CARD_KEY)
    return json.loads(text) if text else None


def save_checkpoint(
    path: Path,
    state_dict: dict,
    card_header: dict[str, Any],
    *,
    by_content: bool = False,
    metadata: dict[str, str] | None = None,
) -> str:
    """Write weights (and the card, in the header, beside any other ``metadata``)
    atomically; return the file's sha256. ``by_content`` names the file after it
    (`tensor_files.content_named`)."""
    header = {**(metadata or {}), CARD_KEY: json.dumps(card_header, sort_keys=True)}
    return write_safetensors(path, state_dict, header, by_content=by_content)


@dataclass
class Verification:
    """What loading checked, for `zoo load` to report."""

    path: Path
    sha256: str
    tensors: int
    parameters: int
    checks: list[str] = field(default_factory=list)
    seconds: float = 0.0
    card_checked: bool = False  # the header's card was compared with the registry's
    verified_before: bool = False  # sha256 and values checked at an earlier load of this very file


def shape_report(path: Path, expected: dict[str, tuple], found: dict[str, tuple]) -> str | None:
    missing = sorted(map(printable, set(expected) - set(found)))
    unexpected = sorted(map(printable, set(found) - set(expected)))
    wrong = [
        f"{printable(n)} {list(found[n])} (model needs {list(expected[n])})"
        for n in sorted(set(expected) & set(found))
        if expected[n] != found[n]
    ]
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing)}")
    if unexpected:
        parts.append(f"unexpected {', '.join(unexpected)}")
    if wrong:
        parts.append(f"wrong shape {'; '.join(wrong)}")
    return f"{path}: tensors do not match the model: " + "; ".join(parts) if parts else None


def tied_names(model) -> dict[str, str]:
    """{name: the earlier name it shares its parameter with}: a head tied to the
    embedding. A checkpoint may store such a tensor once, under its first name
    (an import does), or under both (a training run's state dict does)."""
    first: dict[int, str] = {}
    tied = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        owner = first.setdefault(id(parameter), name)
        if owner != name:
            tied[name] = owner
    return tied


def expected_shapes(target: Mapping[str, Any], tied: Mapping[str, str], stored) -> dict[str, tuple]:
    """The shapes a checkpoint must hold: every tensor the model has, a tied one
    only where the file stores it too."""
    return {n: tuple(t.shape) for n, t in target.items() if n not in tied or n in stored}


def load_verified(
    path: Path,
    expected_sha256: str | None,
    model,
    expected_parameters: int | None,
    card: ModelCard | None = None,
    packed: Mapping[str, Callable[[Path, str, torch.Tensor], None]] | None = None,
    progress=None,
) -> Verification:
    """Load weights into ``model`` after checking them; raise ZooError naming what differs.
    ``packed``: for tensors that hold something other than their values (a GGUF
    file's quantised blocks), the check of their values, by name.

    With ``card`` (the registry's), the card the file carries in its header must
    agree with it in every field but the checksum: weights trained by another
    recipe or for another configuration are refused even when their shapes fit.
    ``progress`` (``stage(what, total)``, ``advance(units)``: a WorkProgress) is told
    of the first verification of a file, which reads and hashes all of it (14 s
    for SmolLM2); later loads of the same file map it and say nothing.
    """
    started = time.perf_counter()
    packed = packed or {}
    target = model.state_dict()
    identity = verified_identity(path, expected_sha256)
    verified_before = identity is not None and read_cache_entry(_verified_entry(path), identity) == expected_sha256
    if verified_before:
        assert expected_sha256 is not None  # the identity names it
        tensors, actual, header, checks = _read_mapped(path), expected_sha256, read_header(path), ["sha256"]
    else:
        tensors, actual, header, checks = _read_verified(path, expected_sha256, _size_limit(target.values()), progress)
    if not packed and PACKED_TYPES_KEY in (header.get("__metadata__") or {}):
        raise ZooError(f"{path}: {PACKED_REFUSAL}")
    tied = tied_names(model)
    problem = shape_report(
        path, expected_shapes(target, tied, tensors), {n: tuple(t.shape) for n, t in tensors.items()}
    )
    if problem:
        raise ZooError(problem)
    checks.append("names")
    checks.append("shapes")
    if progress is not None and not verified_before:
        progress.stage(f"verifying {path.name}: values", len(tensors))
    for name, tensor in tensors.items():
        wanted = target[name].dtype
        if tensor.dtype != wanted and not (tensor.dtype.is_floating_point and wanted.is_floating_point):
            raise ZooError(f"{path}: tensor {name} is {tensor.dtype}, the model needs {wanted}")
        if not verified_before:
            if name in packed:
                packed[name](path, name, tensor)
            else:
                _check_finite(path, name, tensor)
            if progress is not None:
                progress.advance()
    card_checked = card is not None and check_header_card(path, header, card)
    loaded = {**tensors, **{name: tensors[first] for name, first in tied.items() if name not in tensors}}
    if verified_before and all(loaded[name].dtype == target[name].dtype for name in loaded):
        adopt_mapped(model, loaded)
    else:
        with torch.no_grad():
            model.load_state_dict(loaded, strict=True)  # float storage (e.g. bf16) is cast on copy
    parameters = _counted_parameters(path, model, expected_parameters, checks)
    if identity is not None:  # every check passed: the next load of this very file maps it
        write_cache_entry(_verified_entry(path), identity, expected_sha256)
    elapsed = time.perf_counter() - started
    return Verification(path, actual, len(tensors), parameters, checks, elapsed, card_checked, verified_before)


def adopt_mapped(model, tensors: dict[str, torch.Tensor]) -> None:
    """Make the memory-mapped ``tensors`` the model's own, uncopied: the pages are
    the file's (read on first use, shared with every process that maps it, copied
    only where written). A parameter two modules share (a head tied to the
    embedding) is shared again afterwards, as ``assign`` replaces each by name."""
    first_names: dict[int, str] = {}
    shared = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        shared[name] = first_names.setdefault(id(parameter), name)
    model.load_state_dict(tensors, strict=True, assign=True)
    for name, first in shared.items():
        if name != first:
            owner, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(owner), attribute, model.get_parameter(first))


def verified_identity(path: Path, expected_sha256: str | None) -> str | None:
    """The key under which ``path`` is remembered as verified against
    ``expected_sha256``; None when it cannot be (no sha256 to check against, no file)."""
    if expected_sha256 is None:
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    return f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{expected_sha256}"


def _verified_entry(path: Path) -> Path:
    return cache_file_for(path, "verified", ".json")


def _read_mapped(path: Path) -> dict[str, Any]:
    """The tensors of a checkpoint verified before, memory-mapped rather than read."""
    try:
        return load_file(path)
    except (SafetensorError, ValueError, RuntimeError, TypeError, OSError) as exc:
        raise ZooError(f"{path}: cannot read checkpoint: {one_line(exc)}") from None


def load_verified_tensors(
    path: Path,
    expected_sha256: str | None,
    expected_shapes: dict[str, tuple[int, ...]],
    expected_parameters: int | None,
    card: ModelCard | None = None,
) -> tuple[dict[str, Any], Verification]:
    """The tensors of a file that is not a whole network (an adapter's), checked as
    `load_verified` checks a network's: sha256, a safetensors file, exactly
    ``expected_shapes``' names and shapes, floating point and finite, the card in
    the header, and their total size against ``expected_parameters``."""
    started = time.perf_counter()
    limit = _size_limit(expected_shapes.values())
    tensors, actual, header, checks = _read_verified(path, expected_sha256, limit)
    problem = shape_report(path, expected_shapes, {n: tuple(t.shape) for n, t in tensors.items()})
    if problem:
        raise ZooError(problem)
    checks += ["names", "shapes"]
    for name, tensor in tensors.items():
        if not tensor.dtype.is_floating_point:
            raise ZooError(f"{path}: tensor {name} is {tensor.dtype}, not floating point")
        _check_finite(path, name, tensor)
    card_checked = card is not None and check_header_card(path, header, card)
    parameters = sum(t.numel() for t in tensors.values())
    if expected_parameters is not None:
        if parameters != expected_parameters:
            raise ZooError(f"{path}: the card says {expected_parameters:,} parameters, the file holds {parameters:,}")
        checks.append("parameters")
    elapsed = time.perf_counter() - started
    return tensors, Verification(path, actual, len(tensors), parameters, checks, elapsed, card_checked)


STREAM_CHUNK_BYTES = 16 << 20  # what checking a checkpoint in pieces holds in memory at once


def verify_streamed(
    path: Path,
    expected_sha256: str | None,
    network,
    expected_parameters: int | None,
    card: ModelCard | None = None,
) -> Verification:
    """The checks of `load_verified`, reading the file once in pieces of at most
    STREAM_CHUNK_BYTES instead of whole: memory stays flat whatever the checkpoint's
    size (installing a 650 MB variant holds some megabytes, not the weights twice).
    ``network`` may be built on the meta device: only its tensors' names, shapes and
    dtypes and its parameter count are read. Nothing is loaded into it."""
    started = time.perf_counter()
    expected = network.state_dict()
    digest = hashlib.sha256()
    try:
        with open_regular(path, "checkpoint") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > _size_limit(expected.values()):
                raise ZooError(f"{path}: {size:,} bytes, more than the model's tensors can take")
            prefix = handle.read(8)
            length = _header_length(path, prefix, size)
            raw_header = handle.read(length)
            digest.update(prefix + raw_header)
            header = _parse_header(path, raw_header)
            layout = _tensor_layout(path, header, size - 8 - length)
            problem = shape_report(
                path,
                expected_shapes(expected, tied_names(network), layout),
                {n: s for n, (_, s, _) in layout.items()},
            )
            if problem:
                raise ZooError(problem)
            for name, (dtype, _, _) in layout.items():
                wanted = expected[name].dtype
                if dtype != wanted and not (dtype.is_floating_point and wanted.is_floating_point):
                    raise ZooError(f"{path}: tensor {name} is {dtype}, the model needs {wanted}")
            # In file order: one sequential read hashes the file and checks every value.
            for name, (dtype, _, (begin, end)) in sorted(layout.items(), key=lambda item: item[1][2]):
                step = STREAM_CHUNK_BYTES - STREAM_CHUNK_BYTES % dtype.itemsize
                for start in range(begin, end, step):
                    chunk = handle.read(min(step, end - start))
                    digest.update(chunk)
                    _check_finite(path, name, torch.frombuffer(bytearray(chunk), dtype=dtype))
    except FileNotFoundError:
        raise ZooError(f"{path}: checkpoint file not found") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read checkpoint: {describe_os_error(exc)}") from None
    actual = digest.hexdigest()
    checks = []
    if expected_sha256 is not None:
        if actual != expected_sha256:
            raise ZooError(
                f"{path}: sha256 mismatch: registry has {expected_sha256[:16]}…, file has {actual[:16]}… (corrupted or replaced)"
            )
        checks.append("sha256")
    checks += ["names", "shapes"]
    card_checked = card is not None and check_header_card(path, header, card)
    parameters = _counted_parameters(path, network, expected_parameters, checks)
    elapsed = time.perf_counter() - started
    return Verification(path, actual, len(layout), parameters, checks, elapsed, card_checked)


def logical_parameters(network: torch.nn.Module) -> int:
    """The network's parameter count, each packed matrix (zoo_core.loading.packed_modules)
    counted by the values its blocks hold."""
    return sum(p.numel() for p in network.parameters()) + sum(
        getattr(module, "packed_values", 0) for module in network.modules()
    )


def _counted_parameters(path: Path, network: torch.nn.Module, expected: int | None, checks: list[str]) -> int:
    """The network's parameter count, held to the card's when it states one (then "parameters" is checked)."""
    parameters = logical_parameters(network)
    if expected is not None:
        if parameters != expected:
            raise ZooError(f"{path}: the card says {expected:,} parameters, the built model has {parameters:,}")
        checks.append("parameters")
    return parameters


def with_header_card(source: Path, target: Path, card_header: dict[str, Any]) -> str:
    """Write ``source`` (a verified checkpoint) to ``target`` with ``card_header`` as the
    card in its header, the tensors' bytes copied in pieces, never held whole; returns
    the sha256 of what was written. Installing under another name renames the card."""
    digest = hashlib.sha256()

    def pieces():
        with open_regular(source, "checkpoint") as handle:
            length = _header_length(source, handle.read(8), os.fstat(handle.fileno()).st_size)
            header = _parse_header(source, handle.read(length))
            header["__metadata__"] = {
                **(header.get("__metadata__") or {}),
                CARD_KEY: json.dumps(card_header, sort_keys=True),
            }
            text = json.dumps(header, separators=(",", ":")).encode("utf-8")
            text += b" " * (-len(text) % 8)  # the data stays 8-byte aligned, as safetensors writes it
            first = struct.pack("<Q", len(text)) + text
            for piece in itertools.chain([first], iter(lambda: handle.read(STREAM_CHUNK_BYTES), b"")):
                digest.update(piece)
                yield piece

    target.touch(exist_ok=False)
    write_chunks(target, pieces())
    return digest.hexdigest()


def _tensor_layout(path: Path, header: dict[str, Any], data_bytes: int) -> dict[str, tuple[torch.dtype, tuple, tuple]]:
    """Each tensor's dtype, shape and (begin, end) in the data, checked as safetensors
    checks them: a known dtype, a size that is the shape's, and the tensors tiling
    the data exactly, in order, without gap or overlap."""

    def bad(why: str) -> ZooError:
        return ZooError(f"{path}: not a valid safetensors file: {why}")

    layout = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise bad(f"tensor {printable(name)} is not described by dtype, shape and data_offsets")
        dtype = DTYPE_OF_CODE.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
        shape, offsets = entry["shape"], entry["data_offsets"]
        if dtype is None:
            raise bad(f"tensor {printable(name)} has an unknown dtype")
        if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
            raise bad(f"tensor {printable(name)} has no valid shape")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(n) is int for n in offsets)):
            raise bad(f"tensor {printable(name)} has no valid data_offsets")
        count = 1
        for n in shape:
            count *= n
        if offsets[1] - offsets[0] != count * dtype.itemsize:
            raise bad(f"tensor {printable(name)}'s data_offsets do not hold its shape")
        layout[name] = (dtype, tuple(shape), tuple(offsets))
    position = 0
    for _, _, (begin, end) in sorted(layout.values(), key=lambda item: item[2]):
        if begin != position:
            raise bad("the tensors' data_offsets leave a gap or overlap")
        position = end
    if position != data_bytes:
        raise bad(f"the tensors take {position:,} bytes of the {data_bytes:,} after the header")
    return layout


def _read_verified(
    path: Path, expected_sha256: str | None, limit: int, progress=None
) -> tuple[dict[str, Any], str, dict, list[str]]:
    """The file's tensors, its sha256 (checked against ``expected_sha256`` when
    given), its header, and the checks done so far; ``progress`` counts the bytes
    hashed, then (the caller) the tensors checked for finite values."""
    checks = []
    raw = _read_checkpoint_bytes(path, limit)
    actual = _sha256_of(raw, path.name, progress)
    if expected_sha256 is not None:
        if actual != expected_sha256:
            raise ZooError(
                f"{path}: sha256 mismatch: registry has {expected_sha256[:16]}…, file has {actual[:16]}… (corrupted or replaced)"
            )
        checks.append("sha256")
    header = read_header_from_bytes(path, raw)
    try:
        tensors = load(raw)
    except (SafetensorError, ValueError, RuntimeError, TypeError) as exc:
        raise ZooError(f"{path}: not a valid safetensors file: {one_line(exc)}") from None
    return tensors, actual, header, checks


HASH_CHUNK = 64 * 1024 * 1024


def _sha256_of(raw: bytes, name: str, progress=None) -> str:
    """sha256 of ``raw``, in chunks so that ``progress`` can count them."""
    if progress is None:
        return hashlib.sha256(raw).hexdigest()
    progress.stage(f"verifying {name}: sha256", len(raw))  # a first load only
    digest, view = hashlib.sha256(), memoryview(raw)
    for start in range(0, len(raw), HASH_CHUNK):
        chunk = view[start : start + HASH_CHUNK]
        digest.update(chunk)
        progress.advance(len(chunk))
    return digest.hexdigest()


def _check_finite(path: Path, name: str, tensor) -> None:
    if tensor.dtype.is_floating_point and not bool(torch.isfinite(tensor).all()):
        # A diverged run's NaNs would only surface later, as a sampling crash.
        raise ZooError(f"{path}: tensor {name} holds NaN or infinite values")


def _size_limit(shapes) -> int:
    """The most bytes a checkpoint of these tensors (sizes or tensors) can take: the
    widest dtype, 8 bytes, for every element, and the largest header."""
    elements = 0
    for shape in shapes:
        count = 1
        for size in shape if isinstance(shape, tuple) else shape.shape:
            count *= size
        elements += count
    return 8 + MAX_HEADER_BYTES + 8 * elements


def _read_checkpoint_bytes(path: Path, limit: int) -> bytes:
    """The whole file, refused unread if it is larger than ``limit`` (`_size_limit`
    of what it must hold): a hostile file cannot make loading allocate without bound."""
    try:
        return read_limited(path, limit, "checkpoint")
    except FileNotFoundError:
        raise ZooError(f"{path}: checkpoint file not found") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read checkpoint: {describe_os_error(exc)}") from None


def check_header_card(path: Path, header: dict[str, Any], card: ModelCard) -> bool:
    """Compare the card stored in the header with ``card`` (the registry's),
    ignoring the checksum (a file cannot hold its own). False when the file
    carries no card at all (written by another tool); a card that differs is an
    error naming the field."""
    text = (header.get("__metadata__") or {}).get(CARD_KEY)
    if text is None:
        return False
    in_file, in_registry = header_weight_fields(path, text), card.weight_fields()
    for section, key in (("tokenizer", "sha256"), ("recipe", "data_sha256")):
        if section not in in_file or section not in in_registry:  # no recipe (imported): compared whole below
            continue
        if key not in in_file[section] or key not in in_registry[section]:  # recorded by one side only
            in_file[section].pop(key, None)
            in_registry[section].pop(key, None)
    difference = first_difference(in_file, in_registry)
    if difference:
        field_name, in_file, in_registry = difference
        raise ZooError(
            f"{path}: the card in the header disagrees with the registry at '{printable(field_name)}': "
            f"file has {_short(in_file)}, registry has {_short(in_registry)} (weights made for another card)"
        )
    return True


def header_weight_fields(path: Path, text: str) -> dict[str, Any]:
    """The weight-defining fields of the card ``text`` found in the header of
    ``path``; one that is not JSON or not a valid card is an error. A header
    validated before is read from the card cache: loading needs no pydantic."""
    if not isinstance(text, str):  # safetensors metadata values are text; anything else is no card
        raise ZooError(f"{path}: the card in the header is not JSON")
    cached = cached_header_fields(path, text)
    if cached is not None:
        return cached
    # pydantic only now, on a cache miss: `zoo load` of a header seen before needs none
    from ..catalogue.card_validation import header_card_weight_fields

    fields = header_card_weight_fields(path, text)
    cache_header_fields(path, text, fields)
    return fields


def _short(value: Any, limit: int = 60) -> str:
    text = value if value == "(absent)" else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(exc: BaseException) -> str:
    """A library's message, squeezed onto one line (the CLI prints exactly one)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def read_header_from_bytes(path: Path, raw: bytes) -> dict[str, Any]:
    """Bounds-check the header of an in-memory file before handing it to safetensors."""
    length = _header_length(path, raw[:8], len(raw))
    return _parse_header(path, raw[8 : 8 + length])
