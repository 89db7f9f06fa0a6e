"""Deprecated: moved to `zoo_core.kit.testing` (0.1's path, removed in 0.3; see zoo_core._deprecated)."""

from ._deprecated import alias

alias(__name__, "zoo_core.kit.testing")
