"""`zoo verify`: load every checkpoint the catalogue lists, exactly as `zoo load` would.

Each variant is checked by the same code that guards loading (sha256, tensor
names, shapes and dtypes, the card in the header against the registry's,
parameter count, tokenizer file), so a variant passes `zoo verify` exactly when
`zoo load` would accept it. A registry file that cannot be read, or a name
declared twice, is a failure too. Variants declared before they were trained (no
checksum and no file) are listed as having no weights, which is not a failure.

Registry files are read under a shared lock: a `zoo train --publish` rewrites a
checkpoint and its registry entry under the exclusive one, so verification never
sees the new weights with the old checksum.
"""

from __future__ import annotations

import contextlib
import fnmatch
from dataclasses import asdict, dataclass
from pathlib import Path

from .api import has_published_weights, load_variant
from .errors import ZooError
from .files import shared_lock
from .plugin_manager import PluginSet, get_plugins
from .registry import Catalogue, read_registry_file
from .user_catalogue import user_variant_files

OK, FAILED, NO_WEIGHTS = "ok", "FAILED", "no weights"


@dataclass
class VerifyRow:
    name: str
    plugin: str
    file: str
    status: str  # OK, FAILED or NO_WEIGHTS
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


def verify_catalogue(pattern: str | None = None, plugins: PluginSet | None = None) -> list[VerifyRow]:
    """One row per variant whose name matches ``pattern`` (and one per registry
    file that could not be read), in catalogue order."""
    plugins = plugins or get_plugins()
    rows: list[VerifyRow] = []
    catalogue = Catalogue()
    with contextlib.ExitStack() as locks:
        for path, plugin in [*plugins.variant_files, *user_variant_files()]:
            path = Path(path)
            locks.enter_context(shared_lock(path))
            try:
                catalogue.add_all(read_registry_file(path, plugin))
            except ZooError as exc:
                rows.append(VerifyRow("-", plugin, _shown(path), FAILED, str(exc).removeprefix(f"{path}: ")))
        for variant in catalogue:
            if not pattern or fnmatch.fnmatchcase(variant.name, pattern):
                rows.append(_verify_variant(variant, plugins))
    return rows


def _verify_variant(variant, plugins: PluginSet) -> VerifyRow:
    path = variant.checkpoint_path
    row = VerifyRow(variant.name, variant.plugin, _shown(path), OK, "")
    if not has_published_weights(variant):
        row.status, row.detail = NO_WEIGHTS, "not trained yet (no sha256, no file)"
        return row
    try:
        verification = load_variant(variant, plugins).verification
    except ZooError as exc:
        row.status, row.detail = FAILED, str(exc).removeprefix(f"{path}: ")
        return row
    checks = verification.checks + (["card"] if verification.card_checked else [])
    row.detail = f"{verification.tensors} tensors, {verification.parameters:,} parameters; checked {', '.join(checks)}"
    if variant.card.checkpoint.sha256 is None:
        row.detail += " (no sha256 in the card)"
    return row


def _shown(path: Path) -> str:
    """Relative to the working folder when inside it: the table stays readable."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
