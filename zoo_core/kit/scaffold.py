"""`zoo new-plugin NAME`: the skeleton of a third-party plugin package.

What it writes installs as it is (``pip install -e DIR``) and shows up in
`zoo plugins`: a package using every hook (a position encoding named after the
plugin as a do-nothing stub to fill in, a block, a tokenizer, an architecture,
a trainer, an adapter, a dataset registered by name, and a variant trained on
that dataset, with its registry file and package data),
tests that run the zoo's testing kit, and a ``pyproject.toml`` whose ``zoo``
entry point is the whole integration.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from string import Template

from ..errors import ZooError
from ..plugin_api.manager import get_plugins
from ..storage.files import describe_os_error

# An entry-point name that is also a valid position name and, with '-' -> '_',
# a valid Python package name.
_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")

# The skeleton's files, as string.Template texts (``$name``, ``$package``, ...; see
# `plugin_names`), are package data beside this module: they are a third party's code,
# which names the parts it builds on, so they are kept out of the core's own source.
TEMPLATES = Path(__file__).resolve().parent / "templates"


def _template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


# Public-domain text (Shakespeare, Sonnet 18, six times), enough for a tiny byte-level run.
_CORPUS_FILE = "sonnets.txt"


def plugin_names(name: str) -> dict[str, str]:
    """The names derived from NAME: entry point, distribution, package, class."""
    if not _NAME.match(name):
        raise ZooError(
            f"'{name}' is not a plugin name: use lowercase letters, digits and single hyphens, starting with a letter (e.g. 'cope')"
        )
    package = "zoo_" + name.replace("-", "_")
    return {
        "name": name,
        "distribution": "zoo-" + name,
        "package": package,
        "cls": "".join(part.capitalize() for part in name.split("-")) + "Positions",
        "blockcls": "".join(part.capitalize() for part in name.split("-")) + "Block",
        "trainercls": "".join(part.capitalize() for part in name.split("-")) + "Trainer",
        "corpus_sha256": hashlib.sha256(_template(_CORPUS_FILE).encode("utf-8")).hexdigest(),
    }


def _check_name_is_free(name: str) -> None:
    # A plugin whose entry-point or position name is taken would load but be
    # shadowed or conflict; better to say so before writing anything.

    plugins = get_plugins()
    if name in plugins.plugins:
        raise ZooError(
            f"a plugin named '{name}' is already installed ({plugins.plugins[name].distribution}); choose another name"
        )
    positions = plugins.components["positions"]
    if name in positions.names():
        raise ZooError(
            f"position '{name}' is already registered by plugin '{positions.plugin_of(name)}'; choose another name"
        )


def write_plugin_skeleton(name: str, directory: Path | None = None) -> tuple[Path, list[Path]]:
    """Write the skeleton into ``directory`` (default ./zoo-NAME); return it and the files."""
    names = plugin_names(name)
    _check_name_is_free(name)
    directory = directory if directory is not None else Path(names["distribution"])
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ZooError(f"{directory}: already exists and is not an empty directory; choose another --dir")
    files = {  # where each template is written, in the skeleton
        Path("pyproject.toml"): "pyproject.toml.tmpl",
        Path("README.md"): "README.md.tmpl",
        Path(names["package"]) / "__init__.py": "__init__.py.tmpl",
        Path(names["package"]) / "positions.py": "positions.py.tmpl",
        Path(names["package"]) / "parts.py": "parts.py.tmpl",
        Path(names["package"]) / "variants" / "registry.toml": "registry.toml.tmpl",
        Path(names["package"]) / "data" / "sonnets.txt": _CORPUS_FILE,
        Path("tests") / f"test_{names['package']}.py": "test_plugin.py.tmpl",
    }
    written = []
    try:
        for relative, template in files.items():
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(Template(_template(template)).substitute(names), encoding="utf-8")
            written.append(path)
    except OSError as exc:
        raise ZooError(f"{directory}: cannot write the plugin: {describe_os_error(exc)}") from None
    return directory, written
