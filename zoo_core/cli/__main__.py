"""`python -m zoo_core.cli` runs the `zoo` command (as `python -m zoo_core` does)."""

from . import console_main

console_main()
