"""A loaded variant: card, tokenizer and network, sampled with one call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ContextManager, Iterator, Mapping, Sequence

import torch

from ..catalogue.registry import Variant
from ..devices import model_device, place, resolve_device, resolve_dtype
from ..errors import ZooError
from ..plugin_api.hook_points import hook_point_names, hooks, run_with_cache
from ..storage.checkpoints import Verification
from .bos import with_bos
from .sampling import Sample, SampleStream, sample_seeds, stream_text
from .settings import SamplingSettings, resolve_settings


@dataclass
class ZooModel:
    variant: Variant
    tokenizer: Any
    network: torch.nn.Module
    verification: Verification | None = None

    @property
    def card(self):
        """The variant's pydantic ``ModelCard`` (validated on first use)."""
        return self.variant.card

    @property
    def name(self) -> str:
        return self.variant.name

    def encode_prompt(self, prompt: str) -> list[int]:
        if not isinstance(prompt, str):
            raise ZooError(f"prompt must be a string, not {type(prompt).__name__}")
        if not prompt:
            raise ZooError("the prompt is empty; give some text to continue")
        ids = with_bos(self.card.tokenizer.bos_id, self.tokenizer.encode(prompt))
        if not ids:
            raise ZooError(f"the prompt {prompt!r} encodes to no tokens")
        return ids

    # Each sampling method takes ``settings`` (a SamplingSettings, or for short
    # the number of new tokens) and/or the options as keywords, e.g.
    # ``generate("ROMEO:", 60, seed=1, top_p=0.9)``; ``resolve_settings`` turns
    # them into one SamplingSettings, which goes down unchanged.

    def generate(
        self, prompt: str | Sequence[str], settings: SamplingSettings | int | None = None, **options
    ) -> str | list[str]:
        """Each prompt followed by up to ``max_new_tokens`` sampled tokens, as text.

        ``prompt`` is a string (returns a string, or a list of ``num_samples``
        strings) or a list of prompts of any lengths (returns a list, prompt by
        prompt, ``num_samples`` each). Row ``r`` of that list is drawn with seed
        ``seed + r`` and equals ``generate(its_prompt, seed=seed + r)``.
        ``temperature`` 0 is greedy decoding; ``top_k``/``top_p``/``min_p`` keep
        only the most likely tokens; the text ends before the first ``stop``
        string (see ``SamplingSettings``).
        """
        settings = resolve_settings(settings, **options)
        texts = [s.prompt + s.text for s in self.sample(prompt, settings)]
        return texts[0] if isinstance(prompt, str) and settings.num_samples == 1 else texts

    def sample(
        self, prompt: str | Sequence[str], settings: SamplingSettings | int | None = None, **options
    ) -> list[Sample]:
        """``generate`` with the details: one ``Sample`` per row (prompt, its
        tokens, the drawn tokens and text, the row's seed, why it stopped)."""
        settings = resolve_settings(settings, **options)
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        if not prompts:
            raise ZooError("prompt is an empty list; give at least one prompt")
        rows = [p for p in prompts for _ in range(settings.num_samples)]
        encoded = [self.encode_prompt(p) for p in rows]
        seeds = sample_seeds(settings.seed, len(rows))
        # Rows of one prompt length run as one batch. Prompts of different
        # lengths run as separate batches rather than padded: nothing in the
        # networks masks a pad token, and positions would shift, so padding
        # would change the samples; batches by length keep each row exact.
        by_length: dict[int, list[int]] = {}
        for row, ids in enumerate(encoded):
            by_length.setdefault(len(ids), []).append(row)
        results: dict[int, Sample] = {}
        for members in by_length.values():
            stream = SampleStream(
                self.network,
                self.tokenizer,
                [encoded[r] for r in members],
                [seeds[r] for r in members],
                settings=settings,
                prompts=[rows[r] for r in members],
            )
            for r, sample in zip(members, stream.run()):
                results[r] = sample
        return [results[r] for r in range(len(rows))]

    def stream(self, prompt: str, settings: SamplingSettings | int | None = None, **options) -> Iterator[str]:
        """The new text of ``generate(prompt, ...)``, piece by piece as it is drawn."""
        settings = resolve_settings(settings, **options)
        if settings.num_samples != 1:
            raise ZooError(f"stream draws one sample; num_samples must be 1, not {settings.num_samples}")
        return stream_text(self.network, self.tokenizer, self.encode_prompt(prompt), settings=settings)

    @property
    def device(self) -> torch.device:
        return model_device(self.network)

    def to(self, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> "ZooModel":
        """Move (and cast) the network, e.g. ``model.to("cuda", "bfloat16")``; returns the model."""
        target = device if isinstance(device, torch.device) else resolve_device(device) if device else self.device
        if isinstance(dtype, str) or dtype is None:
            dtype = resolve_dtype(dtype, target) if dtype else None
        place(self.network, target, dtype)
        return self

    def parameters(self) -> int:
        return sum(p.numel() for p in self.network.parameters())

    # Looking inside: the network's named hook points (zoo_core.plugin_api.hook_points).

    def hook_points(self) -> list[str]:
        """The names of the network's hook points, in the order a forward passes them."""
        return hook_point_names(self.network)

    def prompt_ids(self, prompt: str | torch.Tensor) -> torch.Tensor:
        """``prompt`` as a (1, T) batch of token ids on the model's device; a string is
        encoded with the model's tokenizer and must fit the context window."""
        if isinstance(prompt, torch.Tensor):
            ids = prompt if prompt.dim() == 2 else prompt.view(1, -1)
            return ids.to(self.device)
        encoded = self.encode_prompt(prompt)
        window = self.card.context_length
        if len(encoded) > window:
            raise ZooError(f"the prompt is {len(encoded)} tokens; '{self.name}' reads at most {window}")
        return torch.tensor([encoded], device=self.device)

    def run_with_cache(
        self, prompt: str | torch.Tensor, names: Sequence[str] | str | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The logits (1, T, V) for ``prompt`` and the activations at the hook points
        ``names`` match (names or globs like ``"blocks.*.resid_post"``; None: all), by name."""
        ids = self.prompt_ids(prompt)
        with torch.no_grad():
            return run_with_cache(self.network, ids, names)

    def hooks(self, mapping: Mapping[str, Any]) -> ContextManager[None]:
        """``with model.hooks({"blocks.0.attention.heads": fn}):`` sets ``fn(activation, name)``
        (None keeps the activation, a tensor replaces it) for the block, and removes it after."""
        return hooks(self.network, mapping)
