"""A GGUF file's header, walked and bounded before any reader trusts it.

GGUF (llama.cpp's format, docs in ggml's gguf.md) is: magic ``GGUF``, a
version, the tensor and metadata counts, the metadata (key, type, value; a
value may be a string or an array), the tensor descriptions (name, dims,
type, offset into the data section), padding to the alignment, the data.
`gguf.GGUFReader` memory-maps the file and believes every count and length
it reads, so a 100-byte file claiming 2**60 metadata entries, a string of
2**60 bytes or a tensor past the end would make it allocate or index without
bound. `check_gguf_header` reads the same header with `struct`, seeking over
every value, and refuses in one line whatever does not fit in the file or
under the caps below; only then does the importer hand the file to the reader.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import gguf

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
_STRING, _ARRAY = 8, 9

# What the importer dequantises, through the package's own gguf.quants.dequantize.
Q = gguf.GGMLQuantizationType
READ_TYPES = frozenset(
    {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K}
)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # ggml's order: the row length first
    type: gguf.GGMLQuantizationType
    offset: int  # from the start of the data section


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata_keys: tuple[str, ...]
    tensors: tuple[TensorInfo, ...]
    data_start: int
    file_size: int


class _Walker:
    """Reads the header front to back; every length is checked against what is
    left of the file before anything is read or skipped."""

    def __init__(self, handle: BinaryIO, path: Path, size: int):
        self.handle, self.path, self.size, self.at = handle, path, size, 0

    def refuse(self, what: str) -> ZooError:
        return ZooError(f"{self.path}: not a GGUF file this zoo reads: {what}")

    def take(self, count: int, what: str) -> bytes:
        if count > self.size - self.at:
            raise self.refuse(f"{what} needs {count:,} bytes at offset {self.at:,}; the file ends at {self.size:,}")
        data = self.handle.read(count)
        self.at += count
        return data

    def skip(self, count: int, what: str) -> None:
        if count > self.size - self.at:
            raise self.refuse(f"{what} needs {count:,} bytes at offset {self.at:,}; the file ends at {self.size:,}")
        self.at += count
        self.handle.seek(self.at)

    def number(self, fmt: str, what: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what))[0]

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

    def value(self, kind: int, what: str) -> int | None:
        """Skip one value; returns it when it is a whole number (general.alignment is one)."""
        if kind in _FIXED:
            data = self.take(_FIXED[kind], what)
            return int.from_bytes(data, "little") if kind in (4, 10) else None
        if kind == _STRING:
            self.skip(self.string_length(what), what)
            return None
        if kind == _ARRAY:
            item = self.number("I", f"the item type of {what}")
            count = self.number("Q", f"the length of {what}")
            if count > MAX_ARRAY_ITEMS:
                raise self.refuse(f"{what} claims {count:,} items (at most {MAX_ARRAY_ITEMS:,} are read)")
            if item in _FIXED:
                self.skip(count * _FIXED[item], what)
            elif item == _STRING:
                if count * 8 > self.size - self.at:  # each string is at least its length field
                    raise self.refuse(f"{what} claims {count:,} strings; the file has room for fewer")
                for _ in range(count):
                    self.skip(self.string_length(what), what)
            else:
                raise self.refuse(f"{what} is an array of type {item} (arrays of arrays are not read)")
            return None
        raise self.refuse(f"{what} has value type {kind}, which GGUF does not define")


def check_gguf_header(path: Path) -> GGUFHeader:
    """The header of the GGUF file at ``path``, every count, length, offset and
    size checked against the file and the caps above, and every tensor of a
    type the importer reads, within the parameter limit; or one line why not."""
    try:
        with open_regular(path, "GGUF file") as handle:
            size = os.fstat(handle.fileno()).st_size
            return _walk(_Walker(handle, path, size))
    except OSError as exc:
        raise ZooError(f"{path}: cannot read: {describe_os_error(exc)}") from None


def _walk(walker: _Walker) -> GGUFHeader:
    if walker.size < 24 or walker.take(4, "the magic") != b"GGUF":
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
    keys: list[str] = []
    alignment = DEFAULT_ALIGNMENT
    for index in range(metadata_count):
        key = walker.string(f"metadata key {index}")
        shown = printable(key)[:80]
        if key in keys:
            raise walker.refuse(f"metadata key '{shown}' appears twice")
        keys.append(key)
        kind = walker.number("I", f"the type of '{shown}'")
        value = walker.value(kind, f"metadata '{shown}'")
        if key == "general.alignment":
            if value is None or value < 1 or value > MAX_ALIGNMENT or value & (value - 1):
                raise walker.refuse("general.alignment is not a power of two up to 1 MiB stored as a whole number")
            alignment = value
    tensors = [_tensor_info(walker, index) for index in range(tensor_count)]
    data_start = -(-walker.at // alignment) * alignment
    _check_tensors(walker, tensors, data_start, alignment)
    return GGUFHeader(version, tuple(keys), tuple(tensors), data_start, walker.size)


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
