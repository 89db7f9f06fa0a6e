"""The plugin author's kit: the conformance tests a plugin runs against its own
components (``testing``) and the skeleton `zoo plugins new` writes (``scaffold``).
It sits beside the command line, above everything it exercises."""
