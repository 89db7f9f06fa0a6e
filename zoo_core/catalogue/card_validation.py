"""Validating a registry file's tables into cards: TOML and pydantic.

Behind the catalogue's front: `zoo list` reads cards from the card cache, and
comes here only for a registry file whose bytes it has not validated before.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ZooError, printable
from .cards import ModelCard
from .limits import ShapeError
from .paths import check_external_paths


def describe_validation_error(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(table)"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    elif first["type"] == "value_error":
        raised = first["ctx"]["error"]
        message = str(raised)
        if isinstance(raised, ShapeError):  # raised for a whole table; name the key
            field = raised.field if not first["loc"] else f"{field}.{raised.field}"
    more = len(error.errors()) - 1
    suffix = f" (and {more} more problem{'s' * (more > 1)})" if more else ""
    return f"field '{field}': {message}{suffix}"


def validate_registry(path: Path, data: bytes, plugin: str, layer: str) -> list[tuple[dict[str, Any], ModelCard]]:
    """Each table of the file (its name included) and the card it validates to."""
    try:
        # utf-8-sig: a byte-order mark (some Windows editors write one) is not TOML, but not an error either
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ZooError(f"{path}: registry is not UTF-8 text (byte {exc.start})") from None
    try:
        tables = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ZooError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # arrays or tables nested thousands deep
        raise ZooError(f"{path}: not valid TOML: nested too deeply") from None
    validated = []
    for name, table in tables.items():
        shown = printable(name)  # a quoted TOML key may hold a line break
        if not isinstance(table, dict):
            raise ZooError(f"{path}: '{shown}' must be a table ([{shown}]), not a {type(table).__name__}")
        given = {"name": name, **table}
        try:
            card = ModelCard.model_validate(given)
        except ValidationError as exc:
            raise ZooError(f"{path}: variant '{shown}': {describe_validation_error(exc)}") from None
        check_external_paths(path, name, card.allow_external_paths, plugin, layer)
        validated.append((given, card))
    return validated


def header_card_weight_fields(path: Path, text: str) -> dict[str, Any]:
    """The weight-defining fields of the card ``text`` a checkpoint's header at
    ``path`` holds (zoo_core.storage.checkpoints), validated."""
    try:
        stored = ModelCard.model_validate(json.loads(text))
    except (json.JSONDecodeError, RecursionError):
        raise ZooError(f"{path}: the card in the header is not JSON") from None
    except ValidationError as exc:
        raise ZooError(
            f"{path}: the card in the header is not a valid card: {describe_validation_error(exc)}"
        ) from None
    return stored.weight_fields()
