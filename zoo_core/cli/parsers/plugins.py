"""The parsers of plugins: plugins, new-plugin, check-plugin. Their handlers are in zoo_core/cli/plugins.py."""

from __future__ import annotations

from pathlib import Path

from .. import completers
from ..completers import complete_with


def plugins_arguments(commands) -> None:
    p = commands.add_parser("plugins", help="list plugins, what they registered, and load errors")
    p.add_argument("--json", action="store_true", help="print the plugins and conflicts as JSON")
    p.set_defaults(run="plugins:cmd_plugins")


def new_plugin_arguments(commands) -> None:
    p = commands.add_parser("new-plugin", help="write the skeleton of a third-party plugin package")
    name = p.add_argument("name", help="the plugin's name, e.g. 'cope' (package zoo_cope, distribution zoo-cope)")
    complete_with(name, completers.nothing)  # a new name
    p.add_argument("--dir", type=Path, help="folder to write (default ./zoo-NAME); must be new or empty")
    p.set_defaults(run="plugins:cmd_new_plugin")


def check_plugin_arguments(commands) -> None:
    p = commands.add_parser("check-plugin", help="run the authors' testing kit on everything a plugin registers")
    complete_with(p.add_argument("name", help="the plugin's name as `zoo plugins` shows it"), completers.plugin_names)
    p.add_argument("--quick", action="store_true", help="conformance only: build each component, skip the model checks")
    p.set_defaults(run="plugins:cmd_check_plugin")
