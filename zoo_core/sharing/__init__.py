"""Sharing variants between machines: one-file archives (pack, install), the
catalogue index a server (or a shared folder) offers, the remotes a user pulls
from, and the bounded download between them."""
