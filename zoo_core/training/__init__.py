"""Training a variant: one step, the loop, a whole run with its lock and card,
resumable state, paired-seed studies, data-parallel workers, losses, progress."""

# `from zoo_core.training import StandardTrainer` (what trainer plugins write) keeps
# working: the loop's public names are served from here, imported on first use so
# that importing a sibling module does not pay for the loop.
_LOOP_NAMES = {
    "TrainingResult",
    "TrainingState",
    "TrainingJob",
    "StandardTrainer",
    "TrainingInterrupted",
    "learning_rate_at",
    "make_optimizer",
    "interim_windows",
    "interrupts_at_step_end",
    "compiled",
    "seeded_network",
}


def __getattr__(name: str):
    if name in _LOOP_NAMES:
        from . import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'zoo_core.training' has no attribute {name!r}")
