"""Plugins: plugins, new-plugin, check-plugin."""

from __future__ import annotations

import json
import sys

from ..errors import ZooError
from ..kit.scaffold import write_plugin_skeleton
from ..kit.testing import check_plugin
from ..loading.api import catalogue
from ..plugin_api.manager import get_plugins


def _plugin_problems_status(plugins) -> int:
    """Non-zero when any plugin has an error or a conflict: `zoo plugins` can gate a CI."""
    problems = plugins.problems()
    if problems:
        print(
            f"zoo: error: {len(problems)} plugin problem{'s' * (len(problems) > 1)} (first: {problems[0]})",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_plugins(args) -> int:
    plugins = get_plugins()
    try:
        catalogue(plugins)  # reports third-party registry errors against their plugin
    except ZooError as exc:
        print(f"zoo: warning: {exc}", file=sys.stderr)
    conflicts = plugins.conflict_messages()
    if args.json:
        print(
            json.dumps(
                {
                    "plugins": [
                        {
                            "name": p.name,
                            "distribution": p.distribution,
                            "version": p.version,
                            "builtin": p.builtin,
                            "registered": p.registered,
                            "errors": p.errors,
                        }
                        for p in plugins.plugins.values()
                    ],
                    "conflicts": conflicts,
                },
                indent=2,
            )
        )
        return _plugin_problems_status(plugins)
    for info in plugins.plugins.values():
        origin = "built-in" if info.builtin else info.distribution
        print(f"{info.name} {info.version} ({origin})")
        for kind, names in info.registered.items():
            print(f"  {kind}: {', '.join(names)}")
        for error in info.errors:
            print(f"  ERROR: {error}")
    for message in conflicts:
        print(f"CONFLICT: {message}")
    return _plugin_problems_status(plugins)


def cmd_new_plugin(args) -> int:
    directory, files = write_plugin_skeleton(args.name, args.dir)
    print(f"wrote plugin '{args.name}' in {directory}:")
    for path in files:
        print(f"  {path.relative_to(directory)}")
    print(f"next: pip install -e {directory} && zoo plugins")
    return 0


def cmd_check_plugin(args) -> int:
    results = check_plugin(args.name, deep=not args.quick)
    for result in results:
        print(f"{result.status:<4} {result.subject}: {result.check}" + (f": {result.detail}" if result.detail else ""))
    failed = [r for r in results if not r.passed]
    if failed:
        raise ZooError(
            f"plugin '{args.name}': {len(failed)} of {len(results)} checks failed (first: {failed[0].subject}: {failed[0].check})"
        )
    skipped = sum(r.status == "skip" for r in results)
    print(
        f"plugin '{args.name}': {len(results) - skipped} checks passed"
        + (f", {skipped} skipped (reasons above)" if skipped else "")
    )
    return 0
