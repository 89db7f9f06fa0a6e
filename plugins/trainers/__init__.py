"""The standard trainer (AdamW or SGD, schedules, resumable state), registered
like any plugin's: a card whose ``recipe.kind`` is ``trained`` is trained by it."""

from zoo_core import hookimpl


@hookimpl
def register_trainers(register):
    register("trained", "zoo_core.training.loop:StandardTrainer")
