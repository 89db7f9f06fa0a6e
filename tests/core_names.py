"""Which names a piece of Python code uses, and which of them it should not.

The core (``zoo_core/``) is written against its own plugin API, never against a
plugin's insides: a built-in plugin's tensor names (``feed_forward.up``) and
setting names (``n_kv_head``) belong in that plugin, and the core asks it for
what it needs through a declared hook or capability. tests/test_core_names.py
runs this checker over every module of the core.

What counts as a use: an attribute name (``net.feed_forward``), a keyword
argument's name (``f(n_layer=2)``) and a string constant other than a docstring
(a dict key, a subscript, an argument, a piece of an f-string). A string that
is a name or a dotted path (``"blocks.0.feed_forward.up.weight"``) is split
into its parts and every part counts; prose (a string with spaces: a message)
counts only for its words that cannot be English (with an underscore or a
digit, ``n_kv_head``, ``norm1``) and for the parts of dotted paths in it, so
that a message saying "the attention table" is not a use of a tensor name.
Comments and docstrings are free to name anything.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")  # a hyphen joins: "transformer-lens" is one name
_PATH_LIKE = re.compile(r"^[\w.{}\[\]*:/-]+$")  # a name, a dotted path or a pattern of one: no spaces
_DOTTED = re.compile(r"[\w{}*]+(?:\.[\w{}*]+)+")


@dataclass(frozen=True)
class Use:
    line: int
    name: str
    how: str  # "attribute", "keyword" or "string"


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings or bare string statements."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for statement in body:
                if (
                    isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)
                ):
                    found.add(id(statement.value))
    return found


def _string_names(text: str) -> Iterator[str]:
    if _PATH_LIKE.match(text):
        yield from _WORD.findall(text)
        return
    for word in _WORD.findall(text):
        if "_" in word.strip("_") or any(c.isdigit() for c in word):
            yield word
    for path in _DOTTED.findall(text):
        yield from _WORD.findall(path)


def uses(source: str) -> Iterator[Use]:
    """Every name ``source`` uses, in the sense above, with its line."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            yield Use(node.end_lineno or node.lineno, node.attr, "attribute")
        elif isinstance(node, ast.keyword) and node.arg is not None:
            yield Use(node.lineno, node.arg, "keyword")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            for name in _string_names(node.value):
                yield Use(node.lineno, name, "string")


def problems(source: str, forbidden: Iterable[str], where: str = "<source>") -> list[str]:
    """``where:line: name (how)`` for each use in ``source`` of a ``forbidden`` name."""
    banned = set(forbidden)
    found = {(use.line, use.name, use.how) for use in uses(source) if use.name in banned}
    return [f"{where}:{line}: {name!r} ({how})" for line, name, how in sorted(found)]


def problems_in(files: Iterable[Path], forbidden: Iterable[str], root: Path) -> list[str]:
    banned = set(forbidden)
    found = []
    for path in sorted(files):
        found += problems(path.read_text(encoding="utf-8"), banned, str(path.relative_to(root)))
    return found
