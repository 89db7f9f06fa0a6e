"""Build hook: put the built-in catalogue's files into the wheel.

The repository keeps `registry.toml`, `checkpoints/` and `data/` at its top
level (the layout of the design: a reader finds the catalogue first), but an
installed zoo has no top level, only packages. Package data can only come from
inside a package folder, and moving the files would break every checkout path,
so this hook copies them, at build time, into ``zoo_plugins/shipped/`` of the
build tree (and experiments/studies.toml into ``zoo_core/training/``).
`zoo_plugins.catalogue` reads them from there when it is installed and from
the repository's top level otherwise.

Editable installs (``pip install -e .``) skip the copy: the package folder is
the repository's own ``plugins/``, whose parent holds the real files.

The package list is discovered here, not in pyproject.toml: `plugins/` installs
as `zoo_plugins` (a bare top-level `plugins` in site-packages would clash with
anyone else's), and setuptools' package finder cannot rename a folder, so it
would find `plugins.blocks` where the wheel needs `zoo_plugins.blocks`. A list
written by hand forgot subpackages once; a new folder with an ``__init__.py``
now ships without anyone editing a list. Everything else (metadata, the
`zoo_plugins = plugins` folder mapping, package data, entry points) is in
pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ["registry.toml", "checkpoints", "data"]
# Generated beside the catalogue but never shipped: training histories are
# documentation of a run, locks and resumable states belong to a run in progress.
# A run's logs (zoo train writes NAME.log.jsonl, and with --log-to a csv file and
# TensorBoard's and MLflow's folders beside the checkpoint) are the watcher's, not the package's.
NOT_SHIPPED = shutil.ignore_patterns(
    "*.lock", "*.state.safetensors", ".*.tmp", "__pycache__", "*.log.jsonl", "*.log.csv", "tensorboard", "mlflow"
)


def discovered_packages() -> list[str]:
    """zoo_core and its subpackages, and plugins/ and its subpackages under the name zoo_plugins."""
    core = find_packages(where=str(ROOT), include=["zoo_core", "zoo_core.*"])
    plugins = find_packages(where=str(ROOT), include=["plugins", "plugins.*"])
    return sorted(core + ["zoo_plugins" + name.removeprefix("plugins") for name in plugins])


class build_py_with_catalogue(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "zoo_plugins" / "shipped"
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for name in SHIPPED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, target / name, ignore=NOT_SHIPPED)
            else:
                shutil.copy2(source, target / name)
        # `zoo experiment STUDY` reads the studies the repository keeps in experiments/.
        shutil.copy2(ROOT / "experiments" / "studies.toml", Path(self.build_lib) / "zoo_core" / "training" / "studies.toml")


setup(packages=discovered_packages(), cmdclass={"build_py": build_py_with_catalogue})
