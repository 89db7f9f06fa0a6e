"""A module's dependencies are read at its top. An import inside a function is
left only where it chooses an optional extra, a platform's module, or where it
keeps the cold-start front (dispatch, help, completion, `zoo list`) free of
torch and pydantic. This reads every import of zoo_core/ and plugins/ (the AST,
no importing) and counts those that sit inside a function."""

from __future__ import annotations

import ast
import fnmatch
import functools
from pathlib import Path

from .conftest import ROOT

# The target: under 60 in all.
TOTAL_CEILING = 60

# Optional extras (pyproject's [project.optional-dependencies]).
EXTRAS = {
    "transformers", "tokenizers", "huggingface_hub", "onnx", "onnxruntime", "transformer_lens",  # hf, onnx, lens
    "starlette", "uvicorn", "jinja2", "markdown", "prometheus_client",  # web
    "tensorboard", "torch.utils.tensorboard", "mlflow",  # run logs (TensorBoard's writer is torch's, on the extra)
    "matplotlib",  # plots
    "gguf",  # zoo import gguf and export --format gguf
}

# Every area, by file pattern (relative to the checkout; the first that matches
# counts), and what each may still import inside a function beyond EXTRAS: the cold-start front's lazy dispatch into the heavy part. `zoo list`,
# `search`, `show`, `datasets`, help and completion import these modules and
# must not import torch or pydantic (tests/test_cold_start.py), nor pay for what
# they never use (rich, tomlkit, filelock: 15-25 ms each).
HOISTED = {
    # `import zoo_core` is torch-free: the API resolves on first use.
    "zoo_core/__init__.py": {"zoo_core.loading", "zoo_core.inference.settings"},
    # The package metadata for --version alone; argcomplete when a shell completes; the
    # catalogue's layers (and the plugin manager, 30 ms) once a command runs, never for help.
    "zoo_core/cli/__init__.py": {"importlib.metadata", "argcomplete", "zoo_core.catalogue.layers"},
    # What a completion reads, when it completes: the catalogue, the plugins' registrations, remotes.toml, files.
    "zoo_core/cli/completers.py": {"zoo_core.loading.lookup", "zoo_core.plugin_api.manager", "zoo_core.sharing.remotes", "argcomplete"},
    # `zoo list --remote` reaches the network; `zoo load` times torch's import apart.
    "zoo_core/cli/catalogue.py": {"zoo_core.sharing", "torch", "zoo_core.loading.api"},
    "zoo_core/cli/tables.py": {"rich"},  # tables, only for commands that print one
    "zoo_core/cli/text.py": {"rich"},
    # A Variant validates its pydantic card on first use, a registry file on a card-cache miss.
    "zoo_core/catalogue/registry.py": {"zoo_core.catalogue.cards", "zoo_core.catalogue.card_validation"},
    "zoo_core/corpus/user_datasets.py": {"tomllib"},  # `zoo list` imports it, reads no TOML
    # `zoo load` and `zoo sample` validate a header's card with pydantic only when the card cache has not.
    "zoo_core/storage/checkpoints.py": {"zoo_core.catalogue.card_validation"},
    "zoo_core/storage/files.py": {"filelock", "sqlite3"},  # the front imports the file helpers, never locks
    "zoo_core/storage/toml_text.py": {"tomlkit"},  # the catalogue's writers are on the front's path
    "zoo_core/storage/locations.py": {"sysconfig"},  # locations is on `zoo list`'s path, sysconfig is not
    "zoo_core/*": set(),
    "plugins/*": set(),
}


def _module(path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute names ``node`` imports (a relative import resolved against ``path``'s package)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not node.level:
        return [node.module or ""]
    package = list(path.relative_to(ROOT).with_suffix("").parts)[: -node.level]
    if node.module is None:  # `from . import sibling` imports the sibling modules
        return [".".join(package + [alias.name]) for alias in node.names]
    return [".".join(package + [node.module])]


@functools.cache
def _function_level_imports() -> list[tuple[Path, int, str]]:
    found = []

    def visit(node: ast.AST, path: Path, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend((path, child.lineno, name) for name in _module(path, child))
            visit(child, path, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    for folder in ("zoo_core", "plugins"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            visit(ast.parse(path.read_text(encoding="utf-8")), path, False)
    return found


@functools.cache
def _needs_an_extra(name: str) -> bool:
    """Whether the zoo's module ``name`` imports an optional extra at its top: importing
    it inside a function is choosing that extra (the packed GGUF layers need gguf)."""
    path = ROOT.joinpath(*name.split(".")).with_suffix(".py")
    if not name.startswith(("zoo_core.", "plugins.")) or not path.is_file():
        return False
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = [module for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)) for module in _module(path, node)]
    return any(_allowed(module, set()) for module in top)


def _allowed(name: str, extra: set[str]) -> bool:
    return any(name == allowed or name.startswith(allowed + ".") for allowed in EXTRAS | extra) or _needs_an_extra(name)


def test_function_level_imports_stay_under_the_ceiling():
    imports = _function_level_imports()
    assert len(imports) < TOTAL_CEILING, f"{len(imports)} function-level imports; import at the module's top"


def test_hoisted_areas_import_inside_functions_only_extras_and_the_fronts_dispatch():
    misplaced = []
    for path, line, name in _function_level_imports():
        relative = path.relative_to(ROOT).as_posix()
        area = next((pattern for pattern in HOISTED if fnmatch.fnmatch(relative, pattern)), None)
        if area is not None and not _allowed(name, HOISTED[area]):
            misplaced.append(f"{relative}:{line}: {name}")
    assert not misplaced, "import these at the top of the module:\n" + "\n".join(misplaced)
