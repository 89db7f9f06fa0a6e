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

from .config import call_with_config
from .decoding import GenerationCache, can_decode, decode
from .row_batch import RowBatch


class TransformerLanguageModel(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        d_model: int,
        n_layer: int,
        n_head: int,
        *,
        components,
        d_ff: int | None = None,
        positions: str = "learned",
        block: str = "pre-norm",
        norm: str = "layernorm",
        dropout: float = 0.0,
        bias: bool = True,
        activation: str = "relu",
        layer_bias: bool | None = None,
        tie_embeddings: bool = False,
        norm_eps: float | None = None,
        qk_norm: bool = False,
        logit_softcap: float | None = None,
    ):
        # bias: the vocabulary head's. activation, layer_bias (biases in every
        # block linear and norm and the final norm, or in none; unset keeps seed
        # 000's mix) and tie_embeddings (the head reuses the token embedding)
        # describe nanoGPT's and GPT-2's layout; they reach the blocks only when
        # set, so a third-party block that does not know them keeps working.
        # qk_norm normalises each head's queries and keys (see CausalSelfAttention);
        # logit_softcap bounds the logits smoothly to (-cap, cap), cap * tanh(logits / cap),
        # as the nanoGPT speedrun does against over-confident early predictions.
        super().__init__()
        if n_layer < 1:
            raise ZooError("a transformer needs at least one layer")
        if logit_softcap is not None and not logit_softcap > 0:
            raise ZooError(f"logit_softcap must be a positive number, not {logit_softcap}")
        self.logit_softcap = logit_softcap
        self.context_length = context_length
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.embed = HookPoint()  # hook points are registered in the order a forward passes them
        self.positions = components["positions"].create(
            positions, d_model=d_model, n_head=n_head, context_length=context_length
        )
        self._embeds_positions = encoding_does(self.positions, "embeds")
        layout: dict[str, Any] = {}
        if activation != "relu":
            layout["activation"] = activation
        if layer_bias is not None:
            layout["bias"] = layer_bias
        if norm_eps is not None:  # unset: torch's defaults (1e-5 for LayerNorm)
            layout["norm_eps"] = norm_eps
        if qk_norm:
            layout["qk_norm"] = True
        self.blocks = nn.ModuleList(
            components["blocks"].create(
                block, d_model=d_model, n_head=n_head, d_ff=d_ff or 4 * d_model, dropout=dropout, norm=norm, **layout
            )
            for _ in range(n_layer)
        )
        # A block written without a `cache` parameter still works; it is just sampled uncached.
        self.supports_kv_cache = all("cache" in inspect.signature(block.forward).parameters for block in self.blocks)
        self.final_norm = (
            nn.RMSNorm(d_model, eps=norm_eps)
            if norm == "rmsnorm"
            else nn.LayerNorm(d_model, bias=layer_bias is not False, eps=1e-5 if norm_eps is None else norm_eps)
        )
        self.lm_head = nn.Linear(d_model, vocab_size, bias=bias)
        if tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight
        # The final norm's output is named inside it: "final_norm" is the norm's
        # own module path, which the checkpoints' tensor names fix.
        self.final_norm.add_module("output", HookPoint())
        self.logits = HookPoint()

    def _run(self, idx: torch.Tensor, need_weights: bool, cache: GenerationCache | None = None):
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        window = start + T
        if window > self.context_length:
            raise ZooError(f"{window} tokens exceed the context window of {self.context_length}; crop the input")
        positions = torch.arange(start, start + T, device=idx.device)
        x = self.embed(self.token_embedding(idx))  # (B, T, C)
        if self._embeds_positions:
            x = self.positions.embed(x, positions)
        maps = []
        for i, block in enumerate(self.blocks):
            # Blocks written before caching existed stay usable: `cache` is only
            # passed when there is one.
            extra = {"cache": cache.layers[i]} if cache is not None else {}
            x, weights = block(x, positions, self.positions, need_weights, **extra)
            maps.append(weights)
        if cache is not None:
            cache.length += T
        x = cast(HookPoint, self.final_norm.output)(self.final_norm(x))
        return self.logits(self.cap_logits(self.lm_head(x))), maps  # (B, T, V)

    def cap_logits(self, head_output: torch.Tensor) -> torch.Tensor:
        """The vocabulary head's output, soft-capped where the config says so."""
        if self.logit_softcap is None:
            return head_output
        return self.logit_softcap * torch.tanh(head_output / self.logit_softcap)

    def make_cache(self) -> GenerationCache:
        """An empty cache for `forward(idx, cache=...)`: feed the prompt, then one token at a time."""
        return GenerationCache(len(self.blocks), self.context_length)

    def make_row_batch(self, max_rows: int):
        """Rows of different lengths decoded together (`zoo serve`'s continuous batching; see row_batch)."""
        return RowBatch(self, max_rows)

    def forward(self, idx, targets=None, cache: GenerationCache | None = None):
        one_new_token = (
            cache is not None and targets is None and idx.shape[1] == 1 and cache.length < self.context_length
        )
        if one_new_token and can_decode(self, cache):
            return decode(self, idx, cache), None  # the same logits in fewer calls
        logits, _ = self._run(idx, need_weights=False, cache=cache)
        loss = None if targets is None else cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    def attention_maps(self, idx):
        return self._run(idx, need_weights=True)[1]


def build_transformer(config, components):
    return call_with_config(TransformerLanguageModel, config, "transformer", components=components)
