"""Persimmon as a zoo family: the hook registers one record (zoo_persimmon/family.py)."""

from zoo_core import hookimpl


@hookimpl
def register_families(register):
    register("persimmon", "zoo_persimmon.family:PERSIMMON")
