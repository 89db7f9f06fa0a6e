"""The zoo's built-in plugins.

Each sub-package is registered through the ``zoo`` entry-point group exactly as a
third-party plugin is, and its ``__init__`` holds only hook implementations, so
that discovering plugins imports no torch.
"""
