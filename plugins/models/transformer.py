"""The transformer language-model wrapper of seed 000.

token ids -> token embedding (+ positions, for residual encodings) -> blocks
-> final LayerNorm -> vocabulary projection -> logits. The position encoding and
the block are looked up by name among the registered plugins, so a third-party
encoding or block works in any variant without touching this file.

Hook points (zoo_core.plugin_api.hook_points), by name: ``embed`` (the token
embeddings), ``positions.added`` (residual encodings), each block's
(``blocks.{i}.resid_pre`` ... ``blocks.{i}.resid_post``, see blocks.py and
attention.py), ``final_norm.output`` and ``logits``.
"""

from __future__ import annotations

import inspect
from typing import Any, cast

import torch
from torch import nn

from zoo_core.errors import ZooError
from zoo_core.plugin_api.components import encoding_does
from zoo_core.plugin_api.hook_points import HookPoint
from zoo_core.training.losses import cross_entropy

from ..blocks.attention import KVCache
from ..blocks.experts import Experts
from ..blocks.norms import make_norm
from .config import named_parameters, refuse_unnamed_settings
from .settings import LAYER_DEFAULTS, LayerSpec, RotarySpec, TransformerConfig

# Card settings handed to the position encoding, by the encoding's parameter name.
ENCODING_SETTINGS = {"rope_base": "base", "rope_scaling": "scaling", "rotary_fraction": "fraction"}


class GenerationCache:
    """Every layer's KV cache plus the position the next token will take.

    There is deliberately no way to drop the oldest token: above the first
    layer, every cached key was computed while attending to it, so sliding the
    cache is not the same as cropping the window, even with relative positions.
    """

    def __init__(self, n_layer: int, capacity: int):
        self.layers = [KVCache(capacity) for _ in range(n_layer)]
        self.length = 0  # tokens cached so far

    def next_positions(self, T: int, device) -> torch.Tensor:
        return torch.arange(self.length, self.length + T, device=device)

    def advance(self, T: int) -> None:
        self.length += T


class _RowSlots:
    """One layer's cache in a RowBatch: each row's keys and values in its slot of
    one buffer, (2, max_rows, H, context, D), and every slot up to the longest row
    handed back; the attention masks each row's by position."""

    def __init__(self, batch: RowBatch, buffer: torch.Tensor | None):
        self.batch, self.buffer = batch, buffer

    def append(self, k, v, positions):
        batch, buffer = self.batch, self.buffer
        if buffer is None:
            raise ValueError("this layer cached nothing while the row's prompt went through it")
        # (B, 2, H, T, D) -> (B, T, 2, H, D): the shape buffer[:, rows, :, positions] indexes
        buffer[:, batch.slots, :, positions] = torch.stack((k, v), dim=1).permute(0, 3, 1, 2, 4)
        seen = buffer[:, : k.shape[0], :, : batch.longest]
        return seen[0], seen[1], batch.key_positions


class RowBatch:
    """Rows of different lengths decoded together: the transformer's side of continuous batching.

    `zoo serve` keeps one running batch per variant; requests join it and leave
    it at token boundaries (zoo_core.web.batching). Each row is first fed its
    prompt alone, through the model's cached forward, exactly as `zoo sample`
    feeds it; its keys and values then move into one buffer per layer shared by
    all rows, a slot per row. A step feeds one token per row through the model's
    own forward, with each row at its own position, (B, 1): one call per layer
    for all rows, and hooks see them all.

    ``rows`` are the callers' handles in slot order: ``step`` returns one row of
    logits per handle, in that order. A row leaves by moving the last row into
    its slot, so the slots in use are always the first ``len(rows)``.
    """

    def __init__(self, model: TransformerLanguageModel, max_rows: int):
        self.model, self.max_rows = model, max_rows
        self.rows: list = []
        self.lengths: list[int] = []  # tokens cached per row
        self.layers: list[_RowSlots] = []
        # set by each step: the rows' slots (B, 1), the longest row and its key positions
        self.slots = self.key_positions = self._every_slot = self._every_position = torch.empty(0, device="meta")
        self.longest = 0

    @staticmethod
    def accepts(model, cache) -> bool:
        """Whether a row fed through ``cache`` (the model's GenerationCache) can join."""
        return isinstance(cache, GenerationCache) and 0 < cache.length < model.context_length

    def full(self) -> bool:
        return len(self.rows) >= self.max_rows

    def add(self, handle, cache: GenerationCache) -> None:
        """Take a row whose prompt went through the model's own forward into ``cache``."""
        slot = len(self.rows)
        if not self.layers:
            # Zeros, not uninitialised memory: a masked key's weight is 0, and 0 × NaN
            # in a slot nothing wrote yet would still be NaN.
            self.layers = [
                _RowSlots(
                    self,
                    None
                    if layer.keys_values is None
                    else layer.keys_values.new_zeros(2, self.max_rows, *layer.keys_values.shape[2:]),
                )
                for layer in cache.layers
            ]
        for slots, layer in zip(self.layers, cache.layers):
            if slots.buffer is not None and layer.keys_values is not None:
                slots.buffer[:, slot, :, : cache.length].copy_(layer.keys_values[:, 0, :, : cache.length])
        self.rows.append(handle)
        self.lengths.append(cache.length)

    def remove(self, handle) -> None:
        slot, last = self.rows.index(handle), len(self.rows) - 1
        if slot != last:
            longest = self.lengths[last]
            for slots in self.layers:
                if slots.buffer is not None:
                    slots.buffer[:, slot, :, :longest].copy_(slots.buffer[:, last, :, :longest])
            self.rows[slot], self.lengths[slot] = self.rows[last], self.lengths[last]
        self.rows.pop()
        self.lengths.pop()

    def room(self, handle) -> bool:
        """Whether the row can take another token without its window sliding."""
        return self.lengths[self.rows.index(handle)] < self.model.context_length

    @property
    def length(self) -> int:
        return max(self.lengths)

    def next_positions(self, T: int, device) -> torch.Tensor:
        """Where each row's new tokens go, (B, T); sets what the layers' slots read."""
        B = len(self.rows)
        if self._every_slot.device != device:  # made once: a step should allocate no more than it must
            self._every_slot = torch.arange(self.max_rows, device=device).view(-1, 1)
            self._every_position = torch.arange(self.model.context_length, device=device)
        self.slots = self._every_slot[:B]
        self.longest = max(self.lengths) + T
        self.key_positions = self._every_position[: self.longest]
        starts = torch.tensor(self.lengths, device=device).view(B, 1)
        return starts if T == 1 else starts + torch.arange(T, device=device)

    def advance(self, T: int) -> None:
        self.lengths = [length + T for length in self.lengths]

    def step(self, tokens: list[int]) -> torch.Tensor:
        """Feed one token per row (in ``rows`` order); return the next-token logits (B, V)."""
        device = self.model.token_embedding.weight.device  # an int8 head's weight is a method
        logits, _ = self.model(torch.tensor(tokens, device=device).view(-1, 1), cache=self)
        return logits[:, -1]


def embed_rows(encoding, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``encoding.embed`` of (B, T, C) at positions (T,) or, rows at positions of
    their own, (B, T): the rows laid end to end as one time axis."""
    if positions.dim() == 1:
        return encoding.embed(x, positions)
    B, T, C = x.shape
    return encoding.embed(x.reshape(1, B * T, C), positions.reshape(B * T)).view(B, T, C)


class TransformerLanguageModel(nn.Module):
    """Built from a `TransformerConfig` (zoo_plugins.models.settings): block i from layer i's
    `LayerSpec`, handed layer i's position encoding. The keyword form,
    ``TransformerLanguageModel(vocab_size, context_length, d_model, n_layer, n_head,
    components=..., **settings)``, takes the card's settings by name and validates them."""

    architecture = "transformer"  # what a refusal of the config names
    defaults: dict[str, Any] = {}  # settings a subclass presets where a card says nothing

    def __init__(
        self,
        vocab_size: int | None = None,
        context_length: int | None = None,
        d_model: int | None = None,
        n_layer: int | None = None,
        n_head: int | None = None,
        *,
        components,
        **settings: Any,
    ):
        # The layout settings (docs/cards.md) reach the blocks and the encoding only
        # when they differ from the default, so a third-party block or encoding that
        # does not know them keeps working; one that does not name a setting the card
        # sets is refused, never built without it.
        super().__init__()
        sizes = {"vocab_size": vocab_size, "context_length": context_length, "d_model": d_model}
        sizes.update(n_layer=n_layer, n_head=n_head)
        given = {**{name: value for name, value in sizes.items() if value is not None}, **settings}
        config = TransformerConfig.read(given, self.architecture, self.defaults)
        if config.vocab_size is None or config.context_length is None:
            raise ZooError(f"architecture '{self.architecture}': config is missing vocab_size or context_length")
        self.config = config
        specs = config.layer_specs()
        # logit_softcap bounds the logits smoothly to (-cap, cap), cap * tanh(logits / cap),
        # as the nanoGPT speedrun does against over-confident early predictions.
        self.logit_softcap = config.logit_softcap
        self.logit_scale = config.logit_scale
        self.embedding_scale = config.embedding_scale
        self.context_length = config.context_length
        d_model = config.d_model
        self.token_embedding = nn.Embedding(config.vocab_size, d_model)
        self.embed = HookPoint()  # hook points are registered in the order a forward passes them
        self.positions, layer_encodings = self._encodings(config, specs, components)
        self._embeds_positions = encoding_does(self.positions, "embeds")
        # Layers whose rotary settings differ from the model-wide ones have encodings of
        # their own: submodules, so that they move with the model (their buffers are not saved).
        extra = list({id(e): e for e in layer_encodings if e is not self.positions}.values())
        if extra:
            self.layer_positions = nn.ModuleList(extra)
        self._layer_encodings = layer_encodings
        layouts = [self._block_settings(config, spec) for spec in specs]
        factory = components["blocks"].factory(config.block)
        every_setting = {name: None for layout in layouts for name in layout}
        refuse_unnamed_settings(f"block '{config.block}'", factory, every_setting)
        d_ff = config.d_ff or 4 * d_model
        self.blocks = nn.ModuleList(
            components["blocks"].create(
                config.block,
                d_model=d_model,
                n_head=config.n_head,
                d_ff=d_ff,
                dropout=config.dropout,
                norm=spec.norm,
                **layout,
            )
            for spec, layout in zip(specs, layouts)
        )
        # A block written without a `cache` parameter still works; it is just sampled uncached.
        self.supports_kv_cache = all("cache" in inspect.signature(block.forward).parameters for block in self.blocks)
        self.final_norm = final_norm(
            config.norm or "layernorm",
            d_model,
            config.layer_bias if config.layernorm_bias is None else config.layernorm_bias,
            config.norm_eps,
        )
        self.lm_head = nn.Linear(d_model, config.vocab_size, bias=config.bias)
        if config.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight
        # The final norm's output is named inside it: "final_norm" is the norm's
        # own module path, which the checkpoints' tensor names fix.
        self.final_norm.add_module("output", HookPoint())
        self.logits = HookPoint()

    @staticmethod
    def _encodings(config: TransformerConfig, specs: list[LayerSpec], components) -> tuple[nn.Module, list[nn.Module]]:
        """The model-wide position encoding, and each layer's: the model-wide one, or
        one per distinct rotary setting of the layers that set their own."""
        factory = components["positions"].factory(config.positions)

        def create(settings: dict[str, Any]) -> nn.Module:
            refuse_unnamed_settings(f"positions '{config.positions}'", factory, settings, ENCODING_SETTINGS)
            named = {ENCODING_SETTINGS[name]: value for name, value in settings.items()}
            if config.head_size is not None and "head_size" in named_parameters(factory):
                named["head_size"] = config.head_size  # an encoding that works per head needs its size
            return components["positions"].create(
                config.positions,
                d_model=config.d_model,
                n_head=config.n_head,
                context_length=config.context_length,
                **named,
            )

        model_wide = RotarySpec(config.rope_base, config.rope_scaling, config.rotary_fraction)
        made: list[tuple[RotarySpec, nn.Module]] = [(model_wide, create(model_wide.encoding_settings()))]
        per_layer = []
        for spec in specs:
            rotary = spec.rotary or RotarySpec()
            if not rotary.rotates:  # `rope = false`: the layer's queries and keys stay as projected
                rotary = RotarySpec(rotates=False)
            encoding = next((e for settings, e in made if settings == rotary), None)
            if encoding is None:
                encoding = create(rotary.encoding_settings()) if rotary.rotates else no_positions(config, components)
                made.append((rotary, encoding))
            per_layer.append(encoding)
        return made[0][1], per_layer

    @staticmethod
    def _block_settings(config: TransformerConfig, spec: LayerSpec) -> dict[str, Any]:
        """What a block factory is handed for the layer beyond the sizes: every setting
        that differs from what the zoo always built, by its card name (layer_bias as ``bias``)."""
        values = {
            "mlp": spec.mlp,
            "bias": spec.layer_bias,
            "norm_eps": spec.norm_eps,
            "qk_norm": spec.qk_norm,
            "n_kv_head": config.n_kv_head,
            "head_size": config.head_size,
            "attention_bias": spec.attention_bias,
            "residual": spec.residual,
            "sliding_window": spec.sliding_window,
            "norm_placement": spec.norm_placement,
            "attention_softcap": spec.attention_softcap,
            "query_scale": spec.query_scale,
            "residual_scale": config.residual_scale,
            "experts": spec.experts,
            "layernorm_bias": spec.layernorm_bias,
        }
        defaults = {**LAYER_DEFAULTS, "bias": None, "n_kv_head": None, "head_size": None, "residual_scale": None}
        chosen = {name: value for name, value in values.items() if value != defaults[name]}
        if spec.experts:  # the experts' model-wide settings, for the layers that have experts
            for name in ("experts_per_token", "expert_d_ff", "norm_topk_prob", "shared_expert_d_ff"):
                if getattr(config, name) is not None:
                    chosen[name] = getattr(config, name)
        return chosen

    def _run(self, idx: torch.Tensor, need_weights: bool, cache: GenerationCache | RowBatch | None = None):
        B, T = idx.shape
        window = (cache.length if cache is not None else 0) + T
        if window > self.context_length:
            raise ZooError(f"{window} tokens exceed the context window of {self.context_length}; crop the input")
        positions = cache.next_positions(T, idx.device) if cache is not None else torch.arange(T, device=idx.device)
        x = self.token_embedding(idx)  # (B, T, C)
        if self.embedding_scale is not None:
            x = x * self.embedding_scale
        x = self.embed(x)
        if self._embeds_positions:
            x = embed_rows(self.positions, x, positions)
        maps = []
        for i, block in enumerate(self.blocks):
            # Blocks written before caching existed stay usable: `cache` is only
            # passed when there is one.
            if cache is None:
                x, weights = block(x, positions, self._layer_encodings[i], need_weights)
            else:
                x, weights = block(x, positions, self._layer_encodings[i], need_weights, cache.layers[i])
            maps.append(weights)
        if cache is not None:
            cache.advance(T)
        x = cast(HookPoint, self.final_norm.output)(self.final_norm(x))
        return self.logits(self.cap_logits(self.lm_head(x))), maps  # (B, T, V)

    def cap_logits(self, head_output: torch.Tensor) -> torch.Tensor:
        """The vocabulary head's output, scaled and soft-capped where the config says so."""
        if self.logit_scale is not None:
            head_output = head_output * self.logit_scale
        if self.logit_softcap is None:
            return head_output
        return self.logit_softcap * torch.tanh(head_output / self.logit_softcap)

    def routing_points(self) -> dict[int, tuple[str, str]]:
        """Per layer whose feed-forward is a mixture of experts, its router's hook points:
        the probabilities over the experts and the experts each token went to."""
        return {
            i: (f"blocks.{i}.feed_forward.probabilities", f"blocks.{i}.feed_forward.chosen")
            for i, block in enumerate(self.blocks)
            if isinstance(getattr(block, "feed_forward", None), Experts)
        }

    def make_cache(self) -> GenerationCache:
        """An empty cache for `forward(idx, cache=...)`: feed the prompt, then one token at a time."""
        return GenerationCache(len(self.blocks), self.context_length)

    def make_row_batch(self, max_rows: int) -> RowBatch:
        """Rows of different lengths decoded together (`zoo serve`'s continuous batching)."""
        return RowBatch(self, max_rows)

    def forward(self, idx, targets=None, cache: GenerationCache | RowBatch | None = None):
        logits, _ = self._run(idx, need_weights=False, cache=cache)
        loss = None if targets is None else cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    def attention_maps(self, idx):
        return self._run(idx, need_weights=True)[1]


def final_norm(kind: str, d_model: int, layer_bias: bool | None, eps: float | None) -> nn.Module:
    """The norm before the vocabulary head: the blocks' kind (LayerNorm for a kind only a plugin's block knows)."""
    if kind in ("rmsnorm", "rmsnorm-unit-offset"):
        return make_norm(kind, d_model, eps=eps)
    return nn.LayerNorm(d_model, bias=layer_bias is not False, eps=1e-5 if eps is None else eps)


def no_positions(config: TransformerConfig, components) -> nn.Module:
    """The encoding of a layer that rotates nothing (`rope = false`): the registered "none"."""
    return components["positions"].create(
        "none", d_model=config.d_model, n_head=config.n_head, context_length=config.context_length
    )


def build_transformer(config, components):
    return TransformerLanguageModel(components=components, **config)
