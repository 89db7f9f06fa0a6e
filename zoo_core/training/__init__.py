"""Training a variant: the job, one step, the loop, a whole run with its lock and card,
resumable state, paired-seed studies, data-parallel workers, losses, progress."""

from importlib import import_module

# `from zoo_core.training import StandardTrainer, TrainingJob` (what trainer plugins
# write) keeps working: these public names are served from here, each imported from
# its module on first use so that importing a sibling module does not pay for the loop.
_PUBLIC_NAMES = {
    "TrainingJob": "job",
    "training_step": "step",
    "learning_rate_at": "step",
    "TrainingResult": "loop",
    "TrainingState": "state",
    "StandardTrainer": "loop",
    "TrainingInterrupted": "loop",
    "make_optimizer": "loop",
    "interim_windows": "loop",
    "interrupts_at_step_end": "loop",
    "compiled": "loop",
    "seeded_network": "loop",
    "RunLog": "run_log",
    "RunDescription": "run_log",
    "open_run_log": "run_log",
}


def __getattr__(name: str):
    if name in _PUBLIC_NAMES:
        return getattr(import_module(f".{_PUBLIC_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'zoo_core.training' has no attribute {name!r}")
