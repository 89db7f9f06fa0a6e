"""The layer contracts (pyproject.toml's [tool.importlinter], docs/architecture.md)
hold, and they catch what they are there for: a new import cycle and an import
from a lower layer up to a higher one. Run with the real lint-imports."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lint_imports(folder: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """lint-imports run in ``folder`` (whose pyproject.toml holds the contracts),
    through this interpreter: the venv's script may name another one."""
    env = None
    if pythonpath is not None:
        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_project_keeps_its_layers():
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def test_a_new_cycle_and_an_upward_import_break_the_contracts(tmp_path):
    # A copy of the two packages, found before the editable install through PYTHONPATH.
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "zoo_core", tmp_path / "zoo_core", ignore=ignore)
    shutil.copytree(ROOT / "plugins", tmp_path / "zoo_plugins", ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    errors = tmp_path / "zoo_core" / "errors.py"
    errors.write_text(errors.read_text() + "\nimport zoo_core.cli  # noqa: E402  (the deliberate upward import)\n")
    # corpus/datasets.py imports text_files.py; this line closes the circle.
    text_files = tmp_path / "zoo_core" / "corpus" / "text_files.py"
    text_files.write_text(text_files.read_text() + "\nfrom . import datasets  # noqa: E402  (the deliberate cycle)\n")

    run = lint_imports(tmp_path, pythonpath=tmp_path)

    assert run.returncode != 0, run.stdout
    assert "zoo_core.errors -> zoo_core.cli" in run.stdout
    assert "No cycles are allowed in zoo_core.corpus" in run.stdout
    assert ".text_files -> .datasets" in run.stdout or ".datasets -> .text_files" in run.stdout
