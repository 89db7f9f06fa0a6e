"""One-file archives: a variant packed into a `.zoo` file, and installed from one.

An archive is a zip file holding, in this order:

    manifest.json        every other member's name, size and sha256; the plugins
                         (distribution and version) the variant needs; an adapter's base
    card.json            the card, its paths relative to the archive
    weights.safetensors  the checkpoint, byte for byte as the catalogue holds it
    tokenizer.EXT        the tokenizer's data file, when the card names one
    history.json         the training history, when one lies beside the checkpoint

Members are stored, not compressed, and an archive with a compressed member is
refused: weights (most of the bytes) barely compress, a stored member is read
and hashed without a decompressor in the way (its size in the archive is its
size on disk, so an archive never writes more than its own size: no zip bombs),
and deflate's output depends on the zlib build, which would make two packs of
the same variant on two machines differ. With a fixed member order, fixed
timestamps (1980-01-01, zip's first day), fixed permissions and sorted JSON
keys, packing the same variant twice gives the same bytes, so an archive's
sha256 names its content.

Installing trusts nothing in the file. Before zipfile parses the central
directory, the end record's member count and directory size are read and
bounded; then names, sizes (each member's within what its kind can need, the
weights' exactly what their safetensors header implies and within the card's
parameter count), the manifest, the card and the history (schemas bounded in
size and nesting) are checked without writing anything. Only then are the
members copied, counted and hashed, into a staging folder inside ``$ZOO_HOME``
that carries its owner's process (zoo_core.storage.staging), where the tensors
are checked against the card as `zoo load` checks them (names, shapes and
parameter count against the network the card builds, on the meta device; every
value finite; the header's card) before anything enters the catalogue, the
weights read in pieces so that memory stays flat at any size. An
adapter variant names its base (name and checkpoint sha256) rather than carrying
it: installing refuses unless that very base is already in the catalogue.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import struct
import zipfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from ..catalogue.card_validation import describe_validation_error
from ..catalogue.cards import NAME_PATTERN, ModelCard, Origin
from ..catalogue.history import MAX_HISTORY_BYTES, parse_history
from ..catalogue.publishing import content_named_tokenizer, history_of, publish_card
from ..catalogue.registry import Variant
from ..errors import ZooError, printable
from ..loading.api import MAX_TOKENIZER_BYTES, catalogue, has_published_weights, verify_variant_files
from ..plugin_api.manager import get_plugins
from ..plugin_api.sources import ROLE_FAMILIES, named_components
from ..storage.checkpoints import MAX_HEADER_BYTES, sha256_file, with_header_card
from ..storage.files import (
    atomic_write,
    content_named,
    describe_os_error,
    exclusive_lock,
    fault_point,
    make_folder,
    open_regular,
    replace_file,
    write_chunks,
)
from ..storage.locations import user_registry_path, zoo_home
from ..storage.staging import make_staging_folder, remove_leftover_staging

if TYPE_CHECKING:
    from ..plugin_api.manager import PluginSet

FORMAT = 1
SUFFIX = ".zoo"
MANIFEST = "manifest.json"
CARD = "card.json"
WEIGHTS = "weights.safetensors"
TOKENIZER = "tokenizer"  # + the tokenizer file's own suffix, e.g. tokenizer.tiktoken
HISTORY = "history.json"

FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can record
MEMBER_MODE = stat.S_IFREG | 0o644

# Limits an archive must keep to; a test lowers them rather than writing gigabytes.
MAX_ARCHIVE_BYTES = 8 * 1024**3  # a billion-parameter float32 checkpoint is 4 GiB
MAX_MEMBER_BYTES = 8 * 1024**3  # the weights; the tokenizer's limit is the loader's, the history's its schema's
MAX_JSON_BYTES = 1024 * 1024  # manifest and card: a card with a large config is some kilobytes
MAX_MEMBERS = 8
# The central directory: an entry is 46 bytes, a name at most 100, extra fields (zip64 sizes) some dozen.
MAX_DIRECTORY_BYTES = MAX_MEMBERS * 1024
WIDEST_DTYPE_BYTES = 8  # float64: weights hold at most this many bytes per parameter the card records
_MEMBER_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20


# --- packing -----------------------------------------------------------------


def pack_variant(name: str, out: Path | None = None) -> Path:
    """Write variant ``name`` as one `.zoo` archive at ``out`` (default
    ``./NAME.zoo``; a folder gets ``NAME.zoo`` inside it), atomically; returns
    the path written. Its checkpoint is checked against the card's sha256 first:
    a damaged file is never packed."""
    plugins = get_plugins()
    variant = catalogue(plugins).get(name)
    card = variant.card
    if not has_published_weights(variant) or card.checkpoint.sha256 is None:
        raise ZooError(f"variant '{name}' has no published weights to pack (its card records no sha256)")
    checkpoint = variant.checkpoint_path
    files: dict[str, Path] = {WEIGHTS: checkpoint}
    tokenizer = variant.tokenizer_path
    if tokenizer is not None:
        files[TOKENIZER + "".join(tokenizer.suffixes[-1:]).lower()] = tokenizer
    history = checkpoint.with_suffix(".history.json")
    if history.is_file():
        files[HISTORY] = history

    members: dict[str, tuple[int, str]] = {}
    try:
        for member, source in files.items():
            members[member] = (os.stat(source).st_size, sha256_file(source, member))
    except FileNotFoundError as exc:
        raise ZooError(f"{exc.filename}: not found; variant '{name}' cannot be packed") from None
    except OSError as exc:
        raise ZooError(f"{exc.filename}: cannot read: {describe_os_error(exc)}") from None
    if members[WEIGHTS][1] != card.checkpoint.sha256:
        raise ZooError(
            f"{checkpoint}: sha256 mismatch: the card has {card.checkpoint.sha256[:16]}…, the file has "
            f"{members[WEIGHTS][1][:16]}… (corrupted or replaced); not packed"
        )

    card_bytes = _json_bytes(_archive_card(variant, next((m for m in files if m.startswith(TOKENIZER)), None)))
    members[CARD] = (len(card_bytes), hashlib.sha256(card_bytes).hexdigest())
    order = [CARD, WEIGHTS, *(m for m in files if m.startswith(TOKENIZER)), *([HISTORY] if HISTORY in files else [])]
    manifest = {
        "format": FORMAT,
        "variant": name,
        "members": [{"name": m, "size": members[m][0], "sha256": members[m][1]} for m in order],
        "plugins": required_plugins(variant, plugins),
    }
    if card.adapter is not None:
        manifest["base"] = {"name": card.adapter.base, "sha256": card.adapter.base_sha256}
    manifest_bytes = _json_bytes(manifest)

    target = Path(out) if out is not None else Path(f"{name}{SUFFIX}")
    if target.is_dir():
        target = target / f"{name}{SUFFIX}"

    def write(temporary: Path) -> None:
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            archive.writestr(_entry(MANIFEST, len(manifest_bytes)), manifest_bytes)
            archive.writestr(_entry(CARD, len(card_bytes)), card_bytes)
            for member in order[1:]:
                size, expected = members[member]
                digest = hashlib.sha256()
                with open_regular(files[member], member) as source, archive.open(_entry(member, size), "w") as sink:
                    for chunk in iter(lambda: source.read(_CHUNK), b""):
                        digest.update(chunk)
                        sink.write(chunk)
                if digest.hexdigest() != expected:  # changed between hashing and copying
                    raise ZooError(f"{files[member]}: changed while it was packed; try again")

    atomic_write(target, write)
    return target


def _entry(name: str, size: int) -> zipfile.ZipInfo:
    """A member's zip entry with everything that could vary fixed: time, mode, system."""
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3  # unix, so that the mode below means what it says
    info.external_attr = MEMBER_MODE << 16
    info.file_size = size
    return info


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _archive_card(variant: Variant, tokenizer_member: str | None) -> dict[str, Any]:
    """The card as the archive holds it: paths relative to the archive, and no
    trace of this machine (its provenance, an opt-in to paths outside its folder)."""
    card = variant.card.model_copy(deep=True)
    card.checkpoint.path = WEIGHTS
    card.tokenizer.file = tokenizer_member
    card.origin = None
    card.allow_external_paths = False
    return card.model_dump(mode="json", exclude_none=True)


def needed_components(card: ModelCard) -> list[tuple[str, str]]:
    """(family, name) of every registered component the card names (see `named_components`)."""
    return [(ROLE_FAMILIES[role], name) for role, name in named_components(card.index_entry()).items()]


def required_plugins(variant: Variant, plugins: PluginSet) -> list[dict[str, str]]:
    """For each component the card names and this machine registers: the plugin,
    its distribution and version (what `pip install` needs on another machine).
    A config value no plugin registers (an architecture's own setting that
    happens to share a key name) is not a component and is left out."""
    required = []
    for kind, name in needed_components(variant.card):
        components = plugins.components[kind]
        if components.problem(name) is not None:
            if kind in ("models", "tokenizers", "adapters"):
                raise ZooError(f"variant '{variant.name}': {components.problem(name)}; it cannot be packed")
            continue
        plugin = components.plugin_of(name)
        info = plugins.plugins.get(plugin)
        required.append(
            {
                "kind": kind,
                "component": name,
                "plugin": plugin,
                "distribution": info.distribution if info else plugin,
                "version": info.version if info else "",
            }
        )
    return required


# --- reading -----------------------------------------------------------------


def archive_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the archive at ``path``, after the checks that need no
    member's content: the archive's size, member names (plain names, no
    folders, links or duplicates), sizes against the limits and the manifest, and
    the manifest's own shape. Cheap: for an index of many archives."""
    opened = _open_archive(Path(path))
    with opened as archive:
        return _checked_manifest(Path(path), archive, opened.size)


def read_archive_card(path: Path) -> ModelCard:
    """The card an archive carries, validated (``archive_manifest``'s checks, and
    the card's size and sha256 against the manifest)."""
    path = Path(path)
    opened = _open_archive(path)
    with opened as archive:
        manifest = _checked_manifest(path, archive, opened.size)
        entry = next(m for m in manifest["members"] if m["name"] == CARD)
        data = _read_member(path, archive, entry)
    return _validated_card(path, data, manifest)


class _open_archive:
    """The archive as an open ZipFile: refused when it is not a regular file, is
    larger than MAX_ARCHIVE_BYTES, is not a zip, or its end record claims more
    members or a larger directory than a variant needs (`_check_end_record`)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> zipfile.ZipFile:
        path = self.path
        try:
            self.handle = open_regular(path, "archive")
        except FileNotFoundError:
            raise ZooError(f"{path}: archive not found") from None
        except OSError as exc:
            raise ZooError(f"{path}: cannot read archive: {describe_os_error(exc)}") from None
        try:
            size = self.size = os.fstat(self.handle.fileno()).st_size
            if size > MAX_ARCHIVE_BYTES:
                raise ZooError(f"{path}: archive is {size:,} bytes, more than the limit of {MAX_ARCHIVE_BYTES:,}")
            _check_end_record(path, self.handle, size)
            self.archive = zipfile.ZipFile(self.handle)
        except zipfile.BadZipFile as exc:
            self.handle.close()
            raise ZooError(f"{path}: not a zoo archive (not a zip file: {exc})") from None
        except BaseException:
            self.handle.close()
            raise
        return self.archive

    def sha256(self) -> str:
        """The archive's sha256, read through the handle the zip is read from:
        the file hashed is the file checked, even if the path is replaced meanwhile."""
        digest = hashlib.sha256()
        self.handle.seek(0)
        for chunk in iter(lambda: self.handle.read(_CHUNK), b""):
            digest.update(chunk)
        return digest.hexdigest()

    def __exit__(self, *exc_info: object) -> None:
        self.archive.close()
        self.handle.close()


_END = struct.Struct("<4s4H2LH")  # the end of central directory record
_END64_LOCATOR = struct.Struct("<4sLQL")
_END64 = struct.Struct("<4sQ2H2L4Q")


def _check_end_record(path: Path, handle: Any, size: int) -> None:
    """Bound the central directory before zipfile parses it (which takes time and
    memory in proportion to what the end record claims). The record is read where
    zipfile reads it first, the file's last 22 bytes, and is required there: a
    zoo archive has no comment, so no other record can be the one zipfile uses.
    A zip64 record (an archive of more than 4 GiB) is read as zipfile reads it."""
    not_zip = ZooError(f"{path}: not a zoo archive (no zip end record in its last {_END.size} bytes)")
    if size < _END.size:
        raise not_zip
    handle.seek(size - _END.size)
    signature, _, _, _, members, directory, offset, comment = _END.unpack(handle.read(_END.size))
    if signature != b"PK\x05\x06" or comment:
        raise not_zip
    if members == 0xFFFF or 0xFFFFFFFF in (directory, offset):
        before = size - _END.size - _END64_LOCATOR.size - _END64.size
        if before < 0:
            raise not_zip
        handle.seek(before)
        record = _END64.unpack(handle.read(_END64.size))
        locator = _END64_LOCATOR.unpack(handle.read(_END64_LOCATOR.size))
        if record[0] != b"PK\x06\x06" or locator[0] != b"PK\x06\x07":
            raise ZooError(f"{path}: not a zoo archive (a damaged zip64 end record)")
        members, directory, offset = record[7], record[8], record[9]
    if members > MAX_MEMBERS:
        raise ZooError(f"{path}: the archive lists {members:,} members, more than a variant needs ({MAX_MEMBERS})")
    if directory > MAX_DIRECTORY_BYTES:
        raise ZooError(
            f"{path}: the archive's directory is {directory:,} bytes, more than {MAX_MEMBERS} members need "
            f"({MAX_DIRECTORY_BYTES:,})"
        )
    if offset + directory > size:
        raise ZooError(f"{path}: not a zoo archive (its directory lies past the end of the file)")
    handle.seek(0)


def _check_entries(path: Path, archive: zipfile.ZipFile, size: int) -> dict[str, zipfile.ZipInfo]:
    """Every entry is a plain, unique, regular, unencrypted, stored member within
    its limit, and together they fit in the archive's ``size``; returns them by name."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ZooError(f"{path}: the archive has {len(infos)} members, more than a variant needs ({MAX_MEMBERS})")
    total = 0
    for info in infos:
        name = info.filename
        shown = printable(name)
        if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
            raise ZooError(f"{path}: member '{shown}' has an absolute path; refused")
        if ".." in re.split(r"[/\\]", name):
            raise ZooError(f"{path}: member '{shown}' points outside the archive's folder; refused")
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise ZooError(f"{path}: member '{shown}' is a symbolic link; refused")
        if info.is_dir() or (stat.S_IFMT(mode) not in (0, stat.S_IFREG)):
            raise ZooError(f"{path}: member '{shown}' is not a regular file; refused")
        if not _MEMBER_NAME.match(name):
            raise ZooError(f"{path}: member '{shown}' is not a plain file name (a-z, 0-9, '.', '_', '-'); refused")
        if info.flag_bits & 0x1:
            raise ZooError(f"{path}: member '{shown}' is encrypted; refused")
        if info.compress_type != zipfile.ZIP_STORED:
            method = "deflated" if info.compress_type == zipfile.ZIP_DEFLATED else f"method {info.compress_type}"
            raise ZooError(
                f"{path}: member '{shown}' is compressed ({method}); a zoo archive stores its members as they are; "
                "refused"
            )
        if info.compress_size != info.file_size:
            raise ZooError(
                f"{path}: member '{shown}' is stored as {info.compress_size:,} bytes but claims {info.file_size:,}; "
                "refused"
            )
        limit = _limit(name)
        if info.file_size > limit:
            raise ZooError(f"{path}: member '{shown}' is {info.file_size:,} bytes, more than the limit of {limit:,}")
        total += info.file_size
    duplicated = sorted(name for name, count in Counter(i.filename for i in infos).items() if count > 1)
    if duplicated:
        raise ZooError(f"{path}: member '{printable(duplicated[0])}' appears more than once; refused")
    if total > size:  # stored members: their bytes are in the file, each once
        raise ZooError(f"{path}: the members claim {total:,} bytes, more than the archive's {size:,}; refused")
    return {info.filename: info for info in infos}


def _limit(name: str) -> int:
    """The most bytes a member of this name can need."""
    if name == HISTORY:
        return MAX_HISTORY_BYTES
    if name.startswith(TOKENIZER + "."):
        return MAX_TOKENIZER_BYTES
    if name.endswith(".json"):
        return MAX_JSON_BYTES
    return MAX_MEMBER_BYTES


def _checked_manifest(path: Path, archive: zipfile.ZipFile, size: int) -> dict[str, Any]:
    """The manifest, its shape checked and its member list equal to the archive's."""
    entries = _check_entries(path, archive, size)
    if MANIFEST not in entries:
        raise ZooError(f"{path}: not a zoo archive (no {MANIFEST})")
    raw = _read_member(path, archive, {"name": MANIFEST, "size": entries[MANIFEST].file_size, "sha256": None})
    manifest = _parsed_json(path, MANIFEST, raw)
    _check_manifest_shape(path, manifest)
    listed = {m["name"]: m for m in manifest["members"]}
    for name, info in entries.items():
        if name != MANIFEST and name not in listed:
            raise ZooError(f"{path}: member '{printable(name)}' is not in the manifest; refused")
    for name, entry in listed.items():
        if name not in entries:
            raise ZooError(f"{path}: member '{printable(name)}' is in the manifest but missing from the archive")
        if entries[name].file_size != entry["size"]:
            raise ZooError(
                f"{path}: member '{printable(name)}' is {entries[name].file_size:,} bytes, "
                f"the manifest says {entry['size']:,}; refused"
            )
    if CARD not in listed or WEIGHTS not in listed:
        raise ZooError(f"{path}: the manifest lists no {CARD if CARD not in listed else WEIGHTS}")
    return manifest


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Member(_Strict):
    name: str = Field(pattern=_MEMBER_NAME.pattern)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=_SHA256.pattern)

    @model_validator(mode="after")
    def _within_the_limits(self) -> "_Member":
        if self.name == MANIFEST or self.size > _limit(self.name):
            raise ValueError("a member must be another file, within the limits")
        return self


class _PluginNeed(_Strict):
    kind: str
    component: str
    plugin: str
    distribution: str
    version: str


class _Base(_Strict):
    name: str
    sha256: str = Field(pattern=_SHA256.pattern)


class _Manifest(_Strict):
    """What `manifest.json` must hold; read once for its checks (the archive's
    code reads the JSON itself)."""

    format: Any
    variant: str
    members: list[_Member]
    plugins: list[_PluginNeed]
    base: _Base | None = None

    @field_validator("format", mode="after")
    @classmethod
    def _a_format_this_zoo_reads(cls, value: Any) -> Any:
        if value != FORMAT:
            raise ValueError("another format")
        return value

    @field_validator("members", mode="after")
    @classmethod
    def _each_name_once(cls, members: list[_Member]) -> list[_Member]:
        if len({m.name for m in members}) != len(members):
            raise ValueError("a name listed twice")
        return members


# The one line each field's problem gives, in the order the fields are reported.
_MANIFEST_PROBLEMS = {
    "variant": "'variant' must be the variant's name",
    "members": "'members' must list each member's plain name, size (within the limits) and sha256",
    "plugins": "'plugins' must list each component's kind, name, plugin, distribution and version",
    "base": "'base' must give the base variant's name and checkpoint sha256",
}


def _check_manifest_shape(path: Path, manifest: Any) -> None:
    def bad(what: str) -> ZooError:
        return ZooError(f"{path}: {MANIFEST}: {what}")

    if not isinstance(manifest, dict):
        raise bad("not a JSON object")
    try:
        _Manifest.model_validate(manifest)
    except ValidationError as exc:
        errors = exc.errors()
    else:
        return
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1)
    if unknown:
        raise bad(f"unknown field '{printable(unknown[0])}'")
    failed = {e["loc"][0] for e in errors if e["loc"]}
    if "format" in failed:
        raise bad(f"format {printable(repr(manifest.get('format')))} is not one this zoo reads ({FORMAT})")
    field = next(field for field in _MANIFEST_PROBLEMS if field in failed)
    if field == "members" and all(e["loc"] == ("members",) and e["type"] == "value_error" for e in errors):
        raise bad("'members' lists a name twice")
    raise bad(_MANIFEST_PROBLEMS[field])


_ANY_JSON = TypeAdapter(Any)


def _parsed_json(path: Path, name: str, data: bytes) -> Any:
    """A JSON member, parsed by pydantic's parser, which refuses nesting deeper than
    200 levels (a hostile member is one line, never a RecursionError)."""
    try:
        return _ANY_JSON.validate_json(data)
    except ValidationError as exc:
        raise ZooError(f"{path}: {name} is not JSON ({printable(exc.errors()[0]['msg'])})") from None


def _check_weights_size(path: Path, archive: zipfile.ZipFile, entry: dict[str, Any], card: ModelCard) -> None:
    """Before anything is extracted: the weights member is exactly as long as its
    safetensors header says (8 bytes, the header, the tensors' bytes), and its
    tensors hold at most WIDEST_DTYPE_BYTES per parameter the card records."""
    size = entry["size"]

    def refused(why: str) -> ZooError:
        return ZooError(f"{path}: member '{WEIGHTS}' {why}; refused")

    try:
        with archive.open(WEIGHTS) as member:
            prefix = member.read(8)
            length = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else size
            if length > min(MAX_HEADER_BYTES, size - 8):  # (a member shorter than 8 bytes lands here too)
                raise refused(f"is not a safetensors file (its header length does not fit its {size:,} bytes)")
            header = _parsed_json(path, f"{WEIGHTS}'s header", member.read(length))
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise refused(f"cannot be read: {' '.join(str(exc).split())}") from None
    if not isinstance(header, dict):
        raise refused("is not a safetensors file (its header is not a JSON object)")
    end = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(offset, int) and offset >= 0 for offset in offsets)
        ):
            raise refused(f"has a tensor '{printable(name)[:100]}' without valid data_offsets")
        end = max(end, offsets[1])
    if 8 + length + end != size:
        raise refused(f"is {size:,} bytes, its safetensors header accounts for {8 + length + end:,}")
    if card.parameters is not None and end > WIDEST_DTYPE_BYTES * card.parameters:
        raise refused(
            f"holds {end:,} bytes of tensors, more than {WIDEST_DTYPE_BYTES} per parameter of the card's "
            f"{card.parameters:,}"
        )


def _read_member(path: Path, archive: zipfile.ZipFile, entry: dict[str, Any]) -> bytes:
    return b"".join(_member_chunks(path, archive, entry))


def _member_chunks(path: Path, archive: zipfile.ZipFile, entry: dict[str, Any]) -> Iterator[bytes]:
    """A member's bytes, never more than the manifest's size; once the last is
    given, its size and (when given) sha256 are checked against ``entry``. A
    failure to read is a ZooError; a failure of whoever writes them stays theirs."""
    name, size = entry["name"], entry["size"]
    digest = hashlib.sha256()
    copied = 0

    def unreadable(exc: Exception) -> ZooError:
        return ZooError(f"{path}: member '{name}' cannot be read: {' '.join(str(exc).split())}")

    try:
        member = archive.open(name)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise unreadable(exc) from None
    with member:
        while True:
            try:
                chunk = member.read(min(_CHUNK, size - copied + 1))  # one byte more reveals a longer member
            except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
                raise unreadable(exc) from None
            if not chunk:
                break
            copied += len(chunk)
            if copied > size:
                raise ZooError(f"{path}: member '{name}' is longer than the manifest's {size:,} bytes; refused")
            digest.update(chunk)
            yield chunk
    if copied != size:
        raise ZooError(f"{path}: member '{name}' is {copied:,} bytes, the manifest says {size:,}; refused")
    if entry["sha256"] is not None and digest.hexdigest() != entry["sha256"]:
        raise ZooError(
            f"{path}: member '{name}' has sha256 {digest.hexdigest()[:16]}…, the manifest says "
            f"{entry['sha256'][:16]}… (altered or damaged); refused"
        )


def _validated_card(path: Path, data: bytes, manifest: dict[str, Any]) -> ModelCard:
    try:
        card = ModelCard.model_validate(_parsed_json(path, CARD, data))
    except ValidationError as exc:
        raise ZooError(f"{path}: {CARD} is not a valid card: {describe_validation_error(exc)}") from None
    listed = {m["name"] for m in manifest["members"]}
    if card.name != manifest["variant"]:
        raise ZooError(f"{path}: the card is for '{card.name}', the manifest for '{printable(manifest['variant'])}'")
    if card.checkpoint.path != WEIGHTS:
        raise ZooError(f"{path}: the card's checkpoint.path must be '{WEIGHTS}', the archive's weights")
    if card.checkpoint.sha256 is None:
        raise ZooError(f"{path}: the card records no checkpoint sha256")
    tokenizer = card.tokenizer.file
    if tokenizer is not None and (not tokenizer.startswith(TOKENIZER) or tokenizer not in listed):
        raise ZooError(
            f"{path}: the card's tokenizer.file '{printable(tokenizer)}' is not the archive's tokenizer member"
        )
    if card.allow_external_paths:
        raise ZooError(f"{path}: the card sets allow_external_paths; an archive's files stay inside it")
    base = manifest.get("base")
    adapter = card.adapter
    if (adapter is None) != (base is None) or (
        adapter is not None and base != {"name": adapter.base, "sha256": adapter.base_sha256}
    ):
        raise ZooError(f"{path}: the manifest's base does not match the card's adapter section")
    return card


# --- installing --------------------------------------------------------------


def install_archive(path: Path, new_name: str | None = None, origin: dict | None = None) -> ModelCard:
    """Install the variant the archive at ``path`` holds into the user catalogue
    (as ``new_name`` when given), after checking everything in it; returns the
    card as installed. ``origin`` adds to what the card's ``origin`` records
    (e.g. ``{"source": URL, "remote": NAME}``; by default the source is ``path``).
    Every refusal is one ZooError line, and then nothing is installed. First the
    staging folders of installs that were killed are removed (`remove_leftover_staging`)."""
    path = Path(path)
    if new_name is not None and not re.match(NAME_PATTERN, new_name):
        raise ZooError(f"--name '{printable(new_name)}': a variant name is lower-case letters, digits, '.' and '-'")
    remove_leftover_staging(zoo_home())  # of installs and pulls that were killed
    plugins = get_plugins()
    opened = _open_archive(path)
    with opened as archive:
        manifest = _checked_manifest(path, archive, opened.size)
        entries = {m["name"]: m for m in manifest["members"]}
        card = _validated_card(path, _read_member(path, archive, entries[CARD]), manifest)
        if HISTORY in entries:
            parse_history(_read_member(path, archive, entries[HISTORY]), f"{path}: {HISTORY}")
        _check_weights_size(path, archive, entries[WEIGHTS], card)
        _check_plugins(path, manifest, card, plugins)
        name = new_name or card.name
        found = catalogue(plugins)
        _check_free(name, found.find(name), new_name is None)
        _check_base(path, manifest, found)
        provenance = _origin(path, opened.sha256(), origin)

        # Every check that needs no extracted file has passed: from here on the
        # members are copied into a staging folder in $ZOO_HOME (the same file
        # system as the catalogue, so moving them in is a rename).
        home = zoo_home()
        created_home = not home.exists()
        make_folder(home)
        staging = make_staging_folder(home)
        try:
            try:
                for member, entry in entries.items():
                    if member != CARD:
                        (staging / member).touch(exist_ok=False)
                        write_chunks(staging / member, _member_chunks(path, archive, entry))
                        fault_point()
            except OSError as exc:  # a full or read-only disk
                raise ZooError(f"{home}: cannot install: {describe_os_error(exc)} (nothing was installed)") from None
            return _verify_and_install(path, staging, card, name, provenance, plugins)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            if created_home:
                _remove_if_empty(home)


def _origin(path: Path, archive_sha256: str, extra: dict | None) -> Any:
    """What the installed card's ``origin`` records; ``extra`` (from a caller
    such as a pull) adds or replaces fields."""
    fields = {
        "archive_sha256": archive_sha256,
        "source": str(path.resolve()),
        "installed": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **(extra or {}),
    }
    try:
        return Origin.model_validate(fields)
    except ValidationError as exc:
        raise ZooError(f"origin: {describe_validation_error(exc)}") from None


def _check_plugins(path: Path, manifest: dict[str, Any], card: ModelCard, plugins: PluginSet) -> None:
    """Each component the variant needs is registered here; a missing one names
    the distribution that provides it (the manifest's word for it)."""
    named = {(p["kind"], p["component"]): p for p in manifest["plugins"]}
    for kind, component in needed_components(card):
        if kind not in plugins.components:
            continue
        problem = plugins.components[kind].problem(component)
        if problem is None:
            continue
        listed = named.get((kind, component))
        if listed is None and kind in ("positions", "blocks", "trainers"):
            continue  # not a component on the machine that packed it either (see required_plugins)
        if listed is None:
            raise ZooError(f"{path}: variant '{card.name}' needs {kind[:-1]} '{component}': {problem}")
        version = f"=={listed['version']}" if listed["version"] else ""
        raise ZooError(
            f"{path}: variant '{card.name}' needs {kind[:-1]} '{printable(component)}' from the plugin "
            f"'{printable(listed['plugin'])}', which is not installed: pip install "
            f"'{printable(listed['distribution'])}{printable(version)}'"
        )


def _check_free(name: str, holder: Variant | None, own_name: bool) -> None:
    if holder is not None:
        hint = "install it under another name with --name NEW" if own_name else "choose another --name"
        raise ZooError(
            f"variant '{name}' already exists in the {holder.layer} catalogue ({holder.source}); installing would "
            f"add a second to the user catalogue ({user_registry_path()}): {hint}"
        )


def _check_base(path: Path, manifest: dict[str, Any], found: Any) -> None:
    base = manifest.get("base")
    if base is None:
        return
    holder = found.find(base["name"])
    wanted = f"'{printable(base['name'])}' (checkpoint sha256 {base['sha256'][:16]}…)"
    if holder is None:
        raise ZooError(
            f"{path}: this adapter applies to the base variant {wanted}, which is not in the catalogue; install it first"
        )
    if holder.card.checkpoint.sha256 != base["sha256"]:
        have = holder.card.checkpoint.sha256 or "none"
        raise ZooError(
            f"{path}: this adapter applies to the base variant {wanted}, but the catalogue's has sha256 {have[:16]}…"
        )


def _verify_and_install(
    path: Path, staging: Path, card: ModelCard, name: str, origin: Any, plugins: PluginSet
) -> ModelCard:
    """Check the staged variant as `zoo load` would (tokenizer sha256, size
    budget, the weights verified against the network the card builds: read in
    pieces, `verify_variant_files`, so memory stays flat at any size), then
    move its files into ``$ZOO_HOME/checkpoints`` and add the card to the user
    registry, under the registry's lock. Returns the card as installed."""
    try:
        verify_variant_files(Variant(card, staging / "registry.toml", "user", layer="user"), plugins)
    except ZooError as exc:
        message = str(exc).replace(str(staging / WEIGHTS), "weights").replace(str(staging), "archive")
        raise ZooError(f"{path}: {message}") from None

    installed = card.model_copy(deep=True)
    installed.name = name
    installed.origin = origin
    if name != card.name:  # the header's card names the variant: the same tensors, written under the new name
        renamed = staging / f"renamed-{WEIGHTS}"
        installed.checkpoint.sha256 = with_header_card(staging / WEIGHTS, renamed, installed.header_json())
        os.replace(renamed, staging / WEIGHTS)

    # Each file is moved out of the staging folder under a name only its content
    # can have, then published in the order no crash can break (settled as
    # NAME.safetensors ... once the registry names them; zoo_core.catalogue.publishing).
    home = zoo_home()
    folder = home / "checkpoints"
    checkpoint = folder / f"{name}.safetensors"
    sha = installed.checkpoint.sha256 or sha256_file(staging / WEIGHTS)
    places = {WEIGHTS: (content_named(checkpoint, sha), checkpoint)}
    if card.tokenizer.file is not None:
        source = staging / card.tokenizer.file
        tokenizer_sha = card.tokenizer.sha256 or sha256_file(source, "tokenizer file")
        target = folder / f"{name}.tokenizer{''.join(Path(card.tokenizer.file).suffixes[-1:])}"
        places[card.tokenizer.file] = (content_named_tokenizer(folder, name, source, tokenizer_sha), target)
    if (staging / HISTORY).exists():
        places[HISTORY] = (history_of(places[WEIGHTS][0]), history_of(checkpoint))
    staged, settled = installed.model_copy(deep=True), installed.model_copy(deep=True)
    for written, which in ((staged, 0), (settled, 1)):
        written.checkpoint.path = str(places[WEIGHTS][which].relative_to(home))
        if card.tokenizer.file is not None:
            written.tokenizer.file = str(places[card.tokenizer.file][which].relative_to(home))

    registry = user_registry_path()
    with exclusive_lock(registry):
        _check_free(name, catalogue(plugins).find(name), name == card.name)  # may have changed meanwhile
        for member, (_, target) in places.items():
            # A file of the very same bytes is no clash: e.g. the tokenizer an adapter of
            # this variant, trained before it was removed by an older zoo, still names.
            if target.is_symlink() or (target.exists() and sha256_file(target) != sha256_file(staging / member)):
                raise ZooError(f"{target}: already exists (left by another variant?); remove it or choose --name")
        created_folder = not folder.exists()
        moves: dict[Path, Path] = {}
        try:
            make_folder(folder)
            for member, (content_path, target) in places.items():
                replace_file(staging / member, content_path)
                moves[content_path] = target
            return publish_card(registry, staged, settled, moves)
        except BaseException as exc:
            for content_path in moves:
                content_path.unlink(missing_ok=True)
            if created_folder:
                _remove_if_empty(folder)
            if isinstance(exc, OSError):
                raise ZooError(f"{folder}: cannot install: {describe_os_error(exc)} (nothing was installed)") from None
            raise


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass
