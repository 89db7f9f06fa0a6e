"""`zoo remove`: delete a variant of the user's own catalogue, card and files.

Only the user catalogue (``$ZOO_HOME``) is ever changed: built-in variants ship
with the zoo, plugin variants with their package (uninstall it), and extra
registry files are the user's to edit. Files are deleted only when they lie
inside ``$ZOO_HOME``; a tokenizer file is kept while another card still uses it.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ZooError
from ..storage.files import atomic_write_text, exclusive_lock
from ..storage.locations import user_registry_path, zoo_home
from .layers import build_catalogue
from .registry import read_registry_file, render_registry


def remove_variant(name: str) -> list[Path]:
    """Remove ``name`` from the user catalogue; return the files deleted."""
    registry = user_registry_path()
    with exclusive_lock(registry):
        mine = read_registry_file(registry, "user", layer="user") if registry.exists() else []
        variant = next((v for v in mine if v.name == name), None)
        if variant is None:
            other = build_catalogue().get(name)  # an unknown name is reported with suggestions
            owner = (
                f"plugin '{other.plugin}' (uninstall its package)"
                if other.layer == "plugin"
                else f"the {other.layer} catalogue"
            )
            raise ZooError(
                f"variant '{name}' belongs to {owner}, declared in {other.source}; "
                f"zoo remove deletes only your own variants, in {registry}"
            )
        remaining = [v for v in mine if v.name != name]
        preamble = _leading_comment(registry)
        atomic_write_text(registry, render_registry([v.card for v in remaining], preamble))
        candidates = [variant.checkpoint_path, variant.checkpoint_path.with_suffix(".history.json")]
        still_used = {v.tokenizer_path for v in remaining}
        if variant.tokenizer_path is not None and variant.tokenizer_path not in still_used:
            candidates.append(variant.tokenizer_path)
        home = zoo_home().resolve()
        deleted = []
        for path in candidates:
            if home in path.resolve().parents and path.is_file():
                path.unlink()
                deleted.append(path)
    return deleted


def _leading_comment(path: Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].removeprefix(" "))
    return "\n".join(lines)
