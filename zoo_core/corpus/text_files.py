"""One registered dataset's record, and reading a text file: what both the
named datasets (datasets.py) and the user's own (user_datasets.py) build on."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ZooError
from ..storage.files import describe_os_error, read_limited

USER = "user"  # the plugin name, and `zoo datasets`' source, of the user's own datasets
# As a variant's name (zoo_core.catalogue.cards.VARIANT_NAME, which imports pydantic).
DATASET_NAME = re.compile(r"[a-z0-9][a-z0-9.\-]*")


@dataclass(frozen=True)
class Dataset:
    """One registered dataset."""

    name: str
    path: Path  # the file; for a user dataset of several files, the folder or the glob pattern
    sha256: str  # of the text's bytes: the file's, or the combined files' (zoo_core.corpus.user_datasets)
    train_fraction: float  # the split rule: this share of the characters trains, the rest validates
    description: str
    plugin: str  # the plugin that registered it, or USER
    kind: str = "file"  # "file"; a user dataset may also be a "folder" or a "glob"
    size: int | None = None  # bytes of text, recorded when a user dataset was added
    added: str = ""  # when a user dataset was added (ISO 8601, UTC)


def sha256_bytes(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


MAX_TEXT_BYTES = 2 * 1024**3  # the text is held in memory, then tokenised


def read_text_bytes(path: Path, what: str, limit: int = MAX_TEXT_BYTES) -> tuple[bytes, str]:
    """The bytes of the text file ``path`` and their text, refused in one line
    naming ``path`` when it is missing, no regular file, too large or not UTF-8."""
    try:
        raw = read_limited(path, limit, what)  # regular files only, never blocking on a FIFO
    except FileNotFoundError:
        raise ZooError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read {what}: {describe_os_error(exc)}") from None
    try:
        return raw, raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ZooError(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None


def check_enough_text(text: str, path: Path, what: str) -> None:
    if len(text) < 100:
        raise ZooError(f"{path}: {what} has only {len(text)} characters; training needs real text")
