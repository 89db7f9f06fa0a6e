"""Writing TOML: every file the zoo writes in TOML (registries, datasets.toml,
remotes.toml) is rendered here, by tomlkit.

A hand-rolled writer once put JSON's escapes in TOML strings, and JSON leaves
U+007F (DEL) as it is where TOML forbids it: a description holding one made the
user's catalogue unreadable. tomlkit escapes every control character TOML
forbids, writes short arrays inline as the zoo's own files always were (so the
shipped registry.toml is rewritten byte for byte), and can keep comments.
It is imported only when a file is written: reading uses the standard tomllib.
"""

from __future__ import annotations

from typing import Any


def _ordered(table: dict[str, Any]) -> dict[str, Any]:
    """Values first, then sub-tables (each after its parent's values, as TOML
    requires), with None left out: TOML has no null."""
    values = {key: value for key, value in table.items() if not isinstance(value, dict) and value is not None}
    tables = {key: _ordered(value) for key, value in table.items() if isinstance(value, dict)}
    return {**values, **tables}


def render_toml(document: dict[str, Any], comment: str = "", quoted_names: bool = False) -> str:
    """``document`` as TOML text, after ``comment`` as '#' lines (a blank line
    between); ``quoted_names``: the top-level tables' names always in quotes
    (``["notes"]``, as datasets.toml has always written them), not only where needed."""
    from tomlkit import api, items  # here: the catalogue's writers are on `zoo list`'s path, tomlkit costs it 15 ms

    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    head = "\n".join(lines) + "\n\n" if lines else ""
    body = api.document()
    for name, value in _ordered(document).items():
        body.append(items.SingleKey(name, t=items.KeyType.Basic) if quoted_names else name, value)
    return (head + api.dumps(body)).rstrip() + "\n"
