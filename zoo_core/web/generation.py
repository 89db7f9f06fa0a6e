"""Loaded models shared between requests, and text streamed as it is sampled.

The server and the gallery both continue prompts through `stream_text`, which
draws exactly what `ZooModel.generate` (and so `zoo sample`) draws for the same
seed and settings: the streamed pieces join to the same text.
"""

from __future__ import annotations

import threading
from typing import Iterator

from ..errors import ZooError


class ModelCache:
    """Each variant loaded once and shared; a lock per name so that two first
    requests for one variant load it once, while other variants load meanwhile."""

    def __init__(self, plugins=None):
        self._plugins = plugins
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
                from ..api import load

                self._models[name] = load(name, self._plugins)
            return self._models[name]

    def loaded(self) -> list[str]:
        return sorted(self._models)


def is_task_model(model) -> bool:
    """Task models (the puzzle) answer a question instead of continuing text."""
    return hasattr(model.network, "ask")


def stream_text(
    model,
    prompt: str,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    stop: threading.Event | None = None,
    usage: dict | None = None,
) -> Iterator[str]:
    """Yield the continuation of ``prompt`` piece by piece.

    Tokens need not end on a character boundary (a BPE token may hold half of a
    UTF-8 character), so the text is decoded whole after every token and only
    what follows the text already sent goes out, holding back an unfinished
    character. Setting ``stop`` ends the generation at the next token; ``usage``
    (a dict) counts the tokens drawn under "completion_tokens".
    """
    from ..inference.sampling import SampleStream

    ids = model.encode_prompt(prompt)
    # The same sampler as `zoo sample` (zoo_core.inference.sampling): the same draws for the
    # same seed, text handed out only once it can no longer change.
    steps = iter(
        SampleStream(
            model.network,
            model.tokenizer,
            [ids],
            [seed],
            prompts=[prompt],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
        )
    )
    try:
        for drawn, pieces in enumerate(steps, 1):
            if stop is not None and stop.is_set():
                return
            if usage is not None:
                usage["completion_tokens"] = min(drawn, max_new_tokens)  # the last step only flushes held-back text
            if pieces[0]:
                yield pieces[0]
    finally:
        steps.close()


def answer_text(model, prompt: str) -> str:
    """What `zoo sample` prints for a task model."""
    if not prompt:
        raise ZooError("the prompt is empty")
    return model.network.ask(model.tokenizer, prompt)
