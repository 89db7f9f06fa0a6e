"""A GGUF file's header, walked and bounded before any reader trusts it.

GGUF (llama.cpp's format, docs in ggml's gguf.md) is: magic ``GGUF``, a
version, the tensor and metadata counts, the metadata (key, type, value; a
value may be a string or an array), the tensor descriptions (name, dims,
type, offset into the data section), padding to the alignment, the data.
`gguf.GGUFReader` memory-maps the file and believes every count and length
it reads, so a 100-byte file claiming 2**60 metadata entries, a string of
2**60 bytes or a tensor past the end would make it allocate or index without
bound; and it makes several numpy objects per array item, about 750 MB per MiB
of array. `check_gguf_header` reads the header itself from a memory map,
every length checked against what is left of the file before a value is built,
the values as plain Python (a few dozen bytes per item: cost linear in the
file's real size), and refuses in one line whatever does not fit in the file or
under the caps below. `tensor_data` then maps the tensors the header lists, as
the reader would, and `check_counts_fit_tensors` holds the counts the metadata
claims (layers, widths, heads) to the tensors before anything is built from them.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.gguf_reader import ReaderTensor

from ..catalogue.limits import limits
from ..errors import ZooError, printable
from ..storage.files import describe_os_error, open_regular

# Caps far above any real model (Llama 3 405B has 1,138 tensors and ~40
# metadata keys; the largest vocabularies ~256k tokens), far below harm.
MAX_TENSORS = 65_536
MAX_METADATA = 65_536
MAX_STRING_BYTES = 16 * 1024 * 1024  # a chat template is kilobytes, a token a few bytes
MAX_ARRAY_ITEMS = 1024 * 1024  # 4x the largest vocabulary; the reader makes Python objects per item
MAX_TENSOR_NAME_BYTES = 256  # ggml's own limit is 64
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ALIGNMENT = 1024 * 1024
DEFAULT_ALIGNMENT = 32  # the spec's, when general.alignment is absent

# GGUF value types: the fixed-size ones by byte size (8 is a string, 9 an array).
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_NUMPY = {
    0: "<u1",
    1: "<i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    7: "<u1",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}
_BOOL, _STRING, _ARRAY = 7, 8, 9

# What the importer dequantises, through the package's own gguf.quants.dequantize:
# every type the package (0.18) dequantises. Q8_1, Q8_K and the integer and F64
# types it does not (llama.cpp writes them only as intermediate or non-weight tensors).
Q = gguf.GGMLQuantizationType
READ_TYPES = frozenset(
    {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K}
    | {Q.IQ1_S, Q.IQ1_M, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S, Q.IQ4_NL, Q.IQ4_XS}
    | {Q.TQ1_0, Q.TQ2_0, Q.MXFP4}
)


_TYPED: dict[gguf.GGMLQuantizationType, np.dtype] = {
    Q.F32: np.dtype("<f4"),
    Q.F16: np.dtype("<f2"),
}  # the reader gives these as numbers, not block bytes


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # ggml's order: the row length first
    type: gguf.GGMLQuantizationType
    offset: int  # from the start of the data section


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, Any]  # key -> plain Python value (arrays as lists)
    tensors: tuple[TensorInfo, ...]
    data_start: int
    file_size: int


class _Walker:
    """Reads the header front to back from a memory map of the file; every length
    is checked against what is left of the file before anything is read or
    built, and a value is built only from bytes the file really holds (so what
    it costs grows with the file's size, never with what a count claims)."""

    def __init__(self, buffer, path: Path, size: int):
        self.buffer, self.path, self.size, self.at = buffer, path, size, 0

    def refuse(self, what: str) -> ZooError:
        return ZooError(f"{self.path}: not a GGUF file this zoo reads: {what}")

    def room(self, count: int, what: str) -> None:
        if count > self.size - self.at:
            raise self.refuse(f"{what} needs {count:,} bytes at offset {self.at:,}; the file ends at {self.size:,}")

    def take(self, count: int, what: str) -> bytes:
        self.room(count, what)
        data = self.buffer[self.at : self.at + count]
        self.at += count
        return data

    def number(self, fmt: str, what: str) -> int:
        size = struct.calcsize("<" + fmt)
        self.room(size, what)
        value = struct.unpack_from("<" + fmt, self.buffer, self.at)[0]
        self.at += size
        return value

    def string_length(self, what: str, cap: int = MAX_STRING_BYTES) -> int:
        length = self.number("Q", f"the length of {what}")
        if length > cap:
            raise self.refuse(f"{what} claims {length:,} bytes (at most {cap:,} are read)")
        return length

    def string(self, what: str, cap: int = MAX_STRING_BYTES) -> str:
        raw = self.take(self.string_length(what, cap), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.refuse(f"{what} is not UTF-8") from None

    def value(self, kind: int, what: str) -> Any:
        """One value as plain Python (what `gguf.GGUFReader`'s ``contents()`` gives)."""
        if kind in _FIXED:
            return self._fixed(kind, 1, what)[0]
        if kind == _STRING:
            return self.string(what)
        if kind == _ARRAY:
            item = self.number("I", f"the item type of {what}")
            count = self.number("Q", f"the length of {what}")
            if count > MAX_ARRAY_ITEMS:
                raise self.refuse(f"{what} claims {count:,} items (at most {MAX_ARRAY_ITEMS:,} are read)")
            if item in _FIXED:
                return self._fixed(item, count, what)
            if item == _STRING:
                if count * 8 > self.size - self.at:  # each string is at least its length field
                    raise self.refuse(f"{what} claims {count:,} strings; the file has room for fewer")
                return [self.string(what) for _ in range(count)]
            raise self.refuse(f"{what} is an array of type {item} (arrays of arrays are not read)")
        raise self.refuse(f"{what} has value type {kind}, which GGUF does not define")

    def _fixed(self, kind: int, count: int, what: str) -> list:
        """``count`` numbers of one fixed-size type, read at once: the file must hold them all first."""
        size = _FIXED[kind] * count
        self.room(size, what)
        values = np.frombuffer(self.buffer, _NUMPY[kind], count, self.at).tolist()
        self.at += size
        return [bool(v) for v in values] if kind == _BOOL else values


def check_gguf_header(path: Path) -> GGUFHeader:
    """The header of the GGUF file at ``path``, every count, length, offset and
    size checked against the file and the caps above, and every tensor of a
    type the importer reads, within the parameter limit; or one line why not."""
    try:
        with open_regular(path, "GGUF file") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 24:
                raise ZooError(f"{path}: not a GGUF file this zoo reads: it does not start with the magic bytes 'GGUF'")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return _walk(_Walker(mapped, path, size))
    except OSError as exc:
        raise ZooError(f"{path}: cannot read: {describe_os_error(exc)}") from None


def _walk(walker: _Walker) -> GGUFHeader:
    if walker.take(4, "the magic") != b"GGUF":
        raise walker.refuse("it does not start with the magic bytes 'GGUF'")
    version = walker.number("I", "the version")
    if version not in (2, 3):
        raise walker.refuse(f"version {version} (versions 2 and 3, little-endian, are read)")
    tensor_count = walker.number("Q", "the tensor count")
    metadata_count = walker.number("Q", "the metadata count")
    if tensor_count > MAX_TENSORS or metadata_count > MAX_METADATA:
        raise walker.refuse(
            f"{tensor_count:,} tensors and {metadata_count:,} metadata entries claimed "
            f"(at most {MAX_TENSORS:,} and {MAX_METADATA:,} are read)"
        )
    metadata: dict[str, Any] = {}
    alignment = DEFAULT_ALIGNMENT
    for index in range(metadata_count):
        key = walker.string(f"metadata key {index}")
        shown = printable(key)[:80]
        if key in metadata:
            raise walker.refuse(f"metadata key '{shown}' appears twice")
        kind = walker.number("I", f"the type of '{shown}'")
        metadata[key] = walker.value(kind, f"metadata '{shown}'")
        if key == "general.alignment":
            value = metadata[key]
            if kind not in (4, 10) or value < 1 or value > MAX_ALIGNMENT or value & (value - 1):
                raise walker.refuse("general.alignment is not a power of two up to 1 MiB stored as a whole number")
            alignment = value
    tensors = [_tensor_info(walker, index) for index in range(tensor_count)]
    data_start = -(-walker.at // alignment) * alignment
    _check_tensors(walker, tensors, data_start, alignment)
    return GGUFHeader(version, metadata, tuple(tensors), data_start, walker.size)


def _tensor_info(walker: _Walker, index: int) -> TensorInfo:
    name = walker.string(f"the name of tensor {index}", MAX_TENSOR_NAME_BYTES)
    shown = printable(name)
    n_dims = walker.number("I", f"the dimension count of '{shown}'")
    if not 1 <= n_dims <= MAX_DIMS:
        raise walker.refuse(f"tensor '{shown}' has {n_dims} dimensions (1 to {MAX_DIMS})")
    dims = tuple(walker.number("Q", f"a dimension of '{shown}'") for _ in range(n_dims))
    code = walker.number("I", f"the type of '{shown}'")
    offset = walker.number("Q", f"the offset of '{shown}'")
    try:
        kind = gguf.GGMLQuantizationType(code)
    except ValueError:
        raise walker.refuse(f"tensor '{shown}' has type {code}, which ggml does not define") from None
    if kind not in READ_TYPES:
        raise walker.refuse(
            f"tensor '{shown}' is {kind.name}; the types read are {', '.join(t.name for t in sorted(READ_TYPES))}"
        )
    return TensorInfo(name, dims, kind, offset)


def _check_tensors(walker: _Walker, tensors: list[TensorInfo], data_start: int, alignment: int) -> None:
    """Each tensor's bytes inside the file, names unique, all within the parameter limit."""
    max_parameters, _ = limits()
    total, names = 0, set()
    for tensor in tensors:
        shown = printable(tensor.name)
        if tensor.name in names:
            raise walker.refuse(f"tensor '{shown}' appears twice")
        names.add(tensor.name)
        values = 1
        for dim in tensor.dims:
            values *= dim
        if values == 0 or values > max_parameters:
            raise walker.refuse(
                f"tensor '{shown}' has dims {list(tensor.dims)}; "
                f"a tensor holds 1 to {max_parameters:,} values (the parameter limit)"
            )
        block, block_bytes = gguf.GGML_QUANT_SIZES[tensor.type]
        if tensor.dims[0] % block:
            raise walker.refuse(f"tensor '{shown}': rows of {tensor.dims[0]} values do not fill {block}-value blocks")
        end = data_start + tensor.offset + values // block * block_bytes
        if tensor.offset % alignment or end > walker.size:
            raise walker.refuse(
                f"tensor '{shown}' lies at data offset {tensor.offset:,}, ending at byte {end:,}; "
                f"the file has {walker.size:,} bytes and tensors start on {alignment}-byte boundaries"
            )
        total += values
    if total > max_parameters:
        raise walker.refuse(
            f"{total:,} values, more than the limit of {max_parameters:,} parameters "
            f"(raise it with --max-parameters or ZOO_MAX_PARAMETERS if you mean it)"
        )


def tensor_data(path: Path, header: GGUFHeader) -> dict[str, ReaderTensor]:
    """The header's tensors over a read-only memory map of the file, as
    `gguf.GGUFReader` gives them (typed F32/F16 arrays, other types as rows of
    block bytes), without its metadata walk: nothing is read until a tensor's
    values are asked for."""
    try:
        mapped = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise ZooError(f"{path}: cannot read: {describe_os_error(exc) if isinstance(exc, OSError) else exc}") from None
    if mapped.size != header.file_size:
        raise ZooError(f"{path}: the file changed while it was read ({mapped.size:,} bytes, not {header.file_size:,})")
    tensors = {}
    for info in header.tensors:
        values = math.prod(info.dims)
        block, block_bytes = gguf.GGML_QUANT_SIZES[info.type]
        start = header.data_start + info.offset
        shape = tuple(reversed(info.dims))
        if info.type in _TYPED:
            data = mapped[start : start + values * _TYPED[info.type].itemsize].view(_TYPED[info.type]).reshape(shape)
        else:
            data = mapped[start : start + values // block * block_bytes].reshape(
                gguf.quant_shape_to_byte_shape(shape, info.type)
            )
        tensors[info.name] = ReaderTensor(
            name=info.name,
            tensor_type=info.type,
            shape=np.array(info.dims, dtype=np.uint64),
            n_elements=values,
            n_bytes=values // block * block_bytes,
            data_offset=start,
            data=data,
            field=None,  # type: ignore[arg-type]  # the header walk has no reader field; nothing here reads it
        )
    return tensors


# The architecture's keys that count layers or size a model's parts; each is checked
# against the tensors the file holds before anything is built from it.
# (gguf's own key templates, "{arch}.block_count", less the architecture)
_LAYER_COUNT = gguf.Keys.LLM.BLOCK_COUNT.removeprefix("{arch}.")
_EMBEDDING = gguf.Keys.LLM.EMBEDDING_LENGTH.removeprefix("{arch}.")
_SIZES = tuple(
    key.removeprefix("{arch}.")
    for key in (
        gguf.Keys.LLM.EMBEDDING_LENGTH,
        gguf.Keys.LLM.FEED_FORWARD_LENGTH,
        gguf.Keys.Attention.HEAD_COUNT,
        gguf.Keys.Attention.HEAD_COUNT_KV,
        gguf.Keys.Attention.KEY_LENGTH,
        gguf.Keys.Attention.VALUE_LENGTH,
        gguf.Keys.Rope.DIMENSION_COUNT,
    )
)
_LAYER = re.compile(r"blk\.(\d{1,9})\.")


def check_counts_fit_tensors(path: Path, header: GGUFHeader, architecture: str) -> None:
    """What the architecture's metadata claims, against what the file holds:
    no more layers than its tensors number (blk.0 … blk.N-1), no width, head
    count or head size larger than every dimension of its tensors, the
    embedding width that of token_embd.weight. A header of a few kilobytes that
    claims a million layers is refused here, before a name map or a model is built."""
    layers = {int(match.group(1)) for info in header.tensors if (match := _LAYER.match(info.name))}
    held = max(layers) + 1 if layers else 0
    widest = max((dim for info in header.tensors for dim in info.dims), default=0)
    metadata = header.metadata
    prefix = f"{architecture}."

    def refuse(key: str, why: str) -> ZooError:
        return ZooError(f"{path}: {printable(prefix + key)} is {printable(repr(metadata[prefix + key]))[:40]}: {why}")

    if prefix + _LAYER_COUNT in metadata:
        claimed = metadata[prefix + _LAYER_COUNT]
        if isinstance(claimed, bool) or not isinstance(claimed, int) or claimed < 1:
            raise refuse(_LAYER_COUNT, "not a whole number above 0")
        if claimed > held or layers != set(range(held)):
            raise refuse(_LAYER_COUNT, f"the file's tensors hold {len(layers):,} layers")
    for key in _SIZES:
        if prefix + key not in metadata:
            continue
        value = metadata[prefix + key]
        values = value if isinstance(value, list) else [value]  # some architectures give one per layer
        if isinstance(value, list) and len(values) > held:
            raise refuse(key, f"{len(values):,} per-layer values; the file's tensors hold {held:,} layers")
        for item in values:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise refuse(key, "not a whole number")
            if item > widest:
                raise refuse(key, f"larger than every dimension of the file's tensors (at most {widest:,})")
    embedding = next((info for info in header.tensors if info.name == "token_embd.weight"), None)
    width = metadata.get(prefix + _EMBEDDING)
    if embedding is not None and isinstance(width, int) and width != embedding.dims[0]:
        raise refuse(_EMBEDDING, f"token_embd.weight holds rows of {embedding.dims[0]:,} values")
