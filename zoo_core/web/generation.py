"""Loaded models shared between requests, and task models' answers.

The server continues prompts through its continuous batches
(zoo_core.web.batching), which draw each row as the sampler behind
`ZooModel.generate` (and so `zoo sample`) draws it: the same seed and settings
give the same text.
"""

from __future__ import annotations

import threading

from ..errors import ZooError
from ..loading.api import catalogue, load
from ..plugin_api.protocols import TaskModel, implements


class ModelCache:
    """Each variant loaded once and shared; a lock per name so that two first
    requests for one variant load it once, while other variants load meanwhile."""

    def __init__(self, plugins=None, quantize: str | None = None) -> None:
        self._plugins, self._quantize = plugins, quantize
        self._models: dict[str, object] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, name: str):
        model = self._models.get(name)
        if model is not None:
            return model
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._models:
                self._models[name] = load(name, self._plugins, quantize=self._quantize, base=self._base_of(name))
            return self._models[name]

    def _base_of(self, name: str):
        """For an adapter variant, its base from this cache (loaded now if need be), whose
        weights the adapter then shares: serving a base and its adapters holds the base
        once. None for other variants, and when quantizing (an adapter is folded in then)."""
        adapter = catalogue(self._plugins).get(name).card.adapter
        if adapter is None or self._quantize is not None:
            return None
        return self.get(adapter.base)

    def forget(self, names) -> None:
        """Drop these variants' models: their cards changed or went away, so the next request loads anew."""
        with self._guard:
            for name in names:
                self._models.pop(name, None)

    def loaded(self) -> list[str]:
        return sorted(self._models)


def is_task_model(model) -> bool:
    """Task models (the puzzle) answer a question instead of continuing text."""
    return implements(model.network, TaskModel)


def answer_text(model, prompt: str) -> str:
    """What `zoo sample` prints for a task model."""
    if not prompt:
        raise ZooError("the prompt is empty")
    return model.network.ask(model.tokenizer, prompt)
