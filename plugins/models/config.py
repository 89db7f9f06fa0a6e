"""Turning a card's config table into constructor arguments, with clear errors."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from zoo_core.errors import ZooError


def call_with_config(
    constructor: Callable[..., Any],
    config: dict[str, Any],
    architecture: str,
    **extra: Any,
) -> Any:
    """Call ``constructor(**config, **extra)``, naming unknown or missing keys."""
    parameters = inspect.signature(constructor).parameters
    unknown = sorted(set(config) - named_parameters(constructor))
    if unknown:
        raise ZooError(f"architecture '{architecture}': unknown config key(s) {', '.join(unknown)}")
    required = {
        name
        for name, p in parameters.items()
        if p.default is p.empty and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }
    missing = sorted(required - set(config) - set(extra))
    if missing:
        raise ZooError(f"architecture '{architecture}': config is missing {', '.join(missing)}")
    return constructor(**config, **extra)


def named_parameters(constructor: Callable[..., Any]) -> set[str]:
    """The keyword names ``constructor`` takes by name (``**kwargs`` names none)."""
    parameters = inspect.signature(constructor).parameters.values()
    return {p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def refuse_unnamed_settings(
    component: str, constructor: Callable[..., Any], settings: dict[str, Any], parameters: dict[str, str] | None = None
) -> None:
    """Refuse the card ``settings`` that ``constructor`` does not name (under
    ``parameters[setting]`` where the parameter has another name than the setting).

    A component that swallows what it does not know (``**_``) would build
    without it and say nothing: a setting must be a parameter by its own name."""
    named = named_parameters(constructor)
    unused = sorted(setting for setting in settings if (parameters or {}).get(setting, setting) not in named)
    if unused:
        raise ZooError(f"{component} does not take the setting(s) {', '.join(unused)}")
