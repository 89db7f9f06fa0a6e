"""zoo-lion: a trainer that updates with the Lion optimizer, and a variant trained by it.

A card whose recipe says ``kind = "lion"`` is trained by `LionTrainer` through
`zoo train`, with the zoo's seeding, schedules, evaluation and resumable state.
"""

from pathlib import Path

from zoo_core import hookimpl

__version__ = "0.1.0"

VARIANTS = Path(__file__).resolve().parent / "variants" / "registry.toml"


@hookimpl
def register_trainers(register):
    register("lion", "zoo_lion.trainer:LionTrainer")


@hookimpl
def register_variants(register):
    register(VARIANTS)
