"""`zoo verify`: load every checkpoint the catalogue lists, exactly as `zoo load` would.

Each variant is checked by the same code that guards loading (sha256, tensor
names, shapes and dtypes, the card in the header against the registry's,
parameter count, tokenizer file), so a variant passes `zoo verify` exactly when
`zoo load` would accept it. A registry file that cannot be read, or a name
declared twice, is a failure too. Variants declared before they were trained (no
checksum and no file) are listed as having no weights, which is not a failure;
nor is the staging folder of an install or pull that was killed, which is listed
(``leftover``) until the next install, pull or `zoo cache clear` removes it.

Registry files are read under a shared lock: a `zoo train --publish` rewrites a
checkpoint and its registry entry under the exclusive one, so verification never
sees the new weights with the old checksum.
"""

from __future__ import annotations

import contextlib
import fnmatch
from dataclasses import asdict, dataclass
from pathlib import Path

from ..catalogue.layers import read_into, registry_files
from ..catalogue.registry import Catalogue
from ..errors import ZooError
from ..plugin_api.manager import PluginSet, get_plugins
from ..storage.files import shared_lock
from ..storage.locations import zoo_home
from ..storage.staging import folder_size, leftover_staging
from .api import has_published_weights, load_variant

OK, FAILED, NO_WEIGHTS, LEFTOVER = "ok", "FAILED", "no weights", "leftover"


@dataclass
class VerifyRow:
    name: str
    plugin: str
    file: str
    status: str  # OK, FAILED, NO_WEIGHTS or LEFTOVER
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


def verify_catalogue(pattern: str | None = None, plugins: PluginSet | None = None) -> list[VerifyRow]:
    """One row per variant whose name matches ``pattern`` (and one per registry
    file that could not be read), in catalogue order; without a pattern, then
    one per staging folder a killed install or pull left in ``$ZOO_HOME``."""
    plugins = plugins or get_plugins()
    rows: list[VerifyRow] = []
    catalogue = Catalogue()
    with contextlib.ExitStack() as locks:
        for file in registry_files(plugins):
            locks.enter_context(shared_lock(file.path))
            try:
                read_into(catalogue, file)
            except ZooError as exc:
                rows.append(
                    VerifyRow("-", file.plugin, _shown(file.path), FAILED, str(exc).removeprefix(f"{file.path}: "))
                )
        for problem in catalogue.problems:
            rows.append(VerifyRow("-", "-", "-", FAILED, problem))
        for variant in catalogue:
            if not pattern or fnmatch.fnmatchcase(variant.name, pattern):
                rows.append(_verify_variant(variant, plugins))
    if not pattern:
        rows += [_leftover_row(folder) for folder in leftover_staging(zoo_home())]
    return rows


def _leftover_row(folder: Path) -> VerifyRow:
    return VerifyRow(
        "-",
        "user",
        _shown(folder),
        LEFTOVER,
        f"{folder_size(folder):,} bytes left by an install or pull that was killed; "
        "the next install, pull or `zoo cache clear` removes it",
    )


def _verify_variant(variant, plugins: PluginSet) -> VerifyRow:
    try:
        path = variant.checkpoint_path
    except ZooError as exc:  # a path leading out of the registry's folder
        return VerifyRow(variant.name, variant.plugin, variant.card.checkpoint.path, FAILED, str(exc))
    row = VerifyRow(variant.name, variant.plugin, _shown(path), OK, "")
    try:
        published = has_published_weights(variant)
    except ZooError as exc:
        row.status, row.detail = FAILED, str(exc)
        return row
    if not published:
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
    if variant.card.tokenizer.file and variant.card.tokenizer.sha256 is None:
        row.detail += " (no tokenizer sha256 in the card)"
    return row


def _shown(path: Path) -> str:
    """Relative to the working folder when inside it: the table stays readable."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
