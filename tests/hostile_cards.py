"""Building hostile catalogues for tests: a copy of a shipped card with fields replaced.

The card is written as TOML without being validated first (validation is what
the tests are about), into a folder laid out like the real catalogue.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import zoo_core
from zoo_core.storage.toml_text import render_toml

from .conftest import ROOT

BASE = "transformer-1b-learned-ctx8"


def card_data(name: str = BASE) -> dict[str, Any]:
    return zoo_core.get_variant(name).card.model_dump(mode="json", exclude_none=True)


def set_field(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    if value is _DELETE:
        data.pop(last, None)
    else:
        data[last] = value


_DELETE = object()
DELETE = _DELETE


def write_catalogue(folder: Path, cards: dict[str, dict[str, Any]], copy_files: bool = True) -> Path:
    """registry.toml in ``folder`` holding ``cards`` (name -> card data), with the
    shipped checkpoints and tokenizer files copied beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    if copy_files and not (folder / "checkpoints").exists():
        (folder / "checkpoints").mkdir()
        for name in ("bpe-1024.tiktoken", "char-65.json", f"{BASE}.safetensors"):
            shutil.copyfile(ROOT / "checkpoints" / name, folder / "checkpoints" / name)
    document = {
        name: {key: value for key, value in copy.deepcopy(data).items() if key != "name"} for name, data in cards.items()
    }
    registry = folder / "registry.toml"
    registry.write_text(render_toml(document), encoding="utf-8")
    return registry


def hostile_variant(folder: Path, name: str, **changes: Any) -> Path:
    """A catalogue of one variant: the shipped BASE card named ``name`` with
    ``changes`` ({"config.n_head": 0, ...}; dots written as "__") applied."""
    data = card_data()
    data["name"] = name
    for dotted, value in changes.items():
        set_field(data, dotted.replace("__", "."), value)
    return write_catalogue(folder, {name: data})
