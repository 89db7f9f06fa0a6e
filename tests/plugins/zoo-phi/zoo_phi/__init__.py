"""Phi as a zoo family: the hook registers one record (zoo_phi/family.py)."""

from zoo_core import hookimpl


@hookimpl
def register_families(register):
    register("phi", "zoo_phi.family:PHI")
