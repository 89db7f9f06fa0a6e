"""The zoo's standard trainer with Lion in place of AdamW.

Only the optimizer changes: batches, schedules, evaluation and the resumable
training state (the optimizer's ``state_dict``) come from the standard trainer,
so a Lion run resumes after a kill exactly as an AdamW run does.
"""

from __future__ import annotations

from zoo_core.training import StandardTrainer

from .lion import Lion


class LionTrainer(StandardTrainer):
    """Lion with the recipe's learning_rate, beta1, beta2 and weight_decay."""

    def make_optimizer(self, model, recipe):
        return Lion(model.parameters(), lr=recipe.learning_rate, betas=(recipe.beta1, recipe.beta2),
                    weight_decay=recipe.weight_decay)
