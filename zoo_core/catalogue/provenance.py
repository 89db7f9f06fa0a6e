"""Where a variant came from, as `zoo show` prints it: the catalogue layer and
file that declare it, the variant it was fine-tuned from or adapts, the plugins
that provided its components and, for an installed archive, its origin."""

from __future__ import annotations

from typing import Any

from ..plugin_api.manager import get_plugins
from ..plugin_api.sources import providers
from .registry import Variant

LAYER_WORDS = {"built-in": "built-in", "plugin": "plugin", "user": "user", "extra": "registry file"}


def provenance(variant: Variant, plugins: Any = None) -> dict[str, Any]:
    """The provenance of ``variant`` as JSON-ready data (what `zoo show --json` adds
    under ``provenance``). Components are the card's record when it has one
    (``components_recorded``: true); otherwise those the installed plugins
    provide now, which is what would build the variant today."""
    card = variant.index  # the card as JSON: `zoo show` imports no pydantic
    found: dict[str, Any] = {
        "layer": LAYER_WORDS.get(variant.layer, variant.layer),
        "plugin": variant.plugin,
        "declared_in": str(variant.source),
    }
    recipe, adapter = card.get("recipe") or {}, card.get("adapter")
    if recipe.get("base") is not None:
        found["base"] = {"name": recipe["base"], "sha256": recipe.get("base_sha256")}
    if adapter is not None:
        found["adapter"] = {"kind": adapter["kind"], "base": adapter["base"], "sha256": adapter["base_sha256"]}
    if card.get("components"):
        found["components"] = {role: dict(source) for role, source in card["components"].items()}
        found["components_recorded"] = True
    else:
        found["components"] = providers(card, plugins or get_plugins())
        found["components_recorded"] = False
    if card.get("origin") is not None:  # installed from an archive (a file, a URL, a remote)
        found["origin"] = dict(card["origin"])
    return found


def provenance_lines(found: dict[str, Any]) -> list[str]:
    """``found`` (from `provenance`) as TOML comment lines: `zoo show`'s output stays a valid registry table."""
    layer = found["layer"] + (f" '{found['plugin']}'" if found["layer"] in ("plugin", "built-in") else "")
    lines = ["# provenance", f"#   layer        {layer}", f"#   declared in  {found['declared_in']}"]
    if "base" in found:
        base = found["base"]
        lines.append(
            f"#   fine-tuned   from {base['name']}" + (f" (sha256 {base['sha256']})" if base["sha256"] else "")
        )
    if "adapter" in found:
        adapter = found["adapter"]
        lines.append(f"#   adapter      {adapter['kind']} on {adapter['base']} (sha256 {adapter['sha256']})")
    heading = "components" if found["components_recorded"] else "components (not recorded; provided now by)"
    lines.append(f"#   {heading}")
    for role, source in found["components"].items():
        lines.append(
            f"#     {role:<10} {source['name']}: plugin '{source['plugin']}' "
            f"({source['distribution']} {source['version']})"
        )
    if "origin" in found:
        origin = found["origin"]
        remote = f" (remote '{origin['remote']}')" if origin.get("remote") else ""
        lines.append(
            f"#   installed    {origin['installed']} from {origin['source']}{remote}, "
            f"archive sha256 {origin['archive_sha256']}"
        )
    return lines
