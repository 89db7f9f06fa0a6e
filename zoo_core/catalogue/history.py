"""A checkpoint's training history (``NAME.history.json``), read as data from elsewhere.

`zoo train` writes it beside the checkpoint: the variant, the recipe, and one row
per evaluation (step, losses). It also arrives in archives from other machines,
so it is read through one schema, bounded in size (``MAX_HISTORY_BYTES``) and in
nesting (the JSON parser refuses more than 200 levels), with the values the
gallery draws typed: a hostile history is a one-line refusal, never a traceback
in whatever reads it later.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ZooError, printable
from ..storage.files import describe_os_error, read_limited
from .card_validation import describe_validation_error

MAX_HISTORY_BYTES = 16 * 1024 * 1024  # a million evaluation rows fit in a quarter of it


class HistoryRow(BaseModel):
    """One evaluation; fields a later zoo adds are ignored, not kept."""

    model_config = ConfigDict(extra="ignore", strict=True)

    step: int = Field(ge=0)
    train: float | None = None
    validation: float | None = None
    train_batch: float | None = None
    windows: int | None = None


class TrainingHistory(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    variant: str = Field(max_length=200)
    recipe: dict[str, Any]
    history: list[HistoryRow]


def parse_history(data: bytes, where: str) -> TrainingHistory:
    """``data`` as a training history; anything else is one ZooError line naming ``where``."""
    if len(data) > MAX_HISTORY_BYTES:
        raise ZooError(f"{where}: {len(data):,} bytes, more than the {MAX_HISTORY_BYTES:,} a history may have")
    try:
        return TrainingHistory.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] in ("json_invalid", "json_type"):  # not JSON, or nested past the parser's limit
            raise ZooError(f"{where}: not a training history (not JSON: {printable(first['msg'])})") from None
        raise ZooError(f"{where}: not a training history ({printable(describe_validation_error(exc))})") from None


def read_history(path: Path) -> TrainingHistory | None:
    """The history at ``path``; None when there is none."""
    try:
        data = read_limited(path, MAX_HISTORY_BYTES, "training history")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read: {describe_os_error(exc)}") from None
    return parse_history(data, str(path))
