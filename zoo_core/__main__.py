"""`python -m zoo_core` runs the `zoo` command."""

from .cli import console_main

console_main()
