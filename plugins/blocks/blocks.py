"""Transformer blocks: attention then a position-wise feed-forward network."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from zoo_core.plugin_api.hook_points import HookPoint

from .attention import CausalSelfAttention
from .experts import Experts
from .norms import make_norm


def gelu_tanh(x):
    """GELU's tanh approximation: what OpenAI's GPT-2 weights were trained with ("gelu_new")."""
    return F.gelu(x, approximate="tanh")


def relu_squared(x):
    """ReLU(x)²: the nanoGPT speedrun's activation (modded-nanogpt), as sparse as ReLU but smooth at 0."""
    return F.relu(x).square()


# "gelu" is the exact (erf) form, as in nanoGPT; seed 000 uses ReLU.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu-tanh": gelu_tanh,
    "relu2": relu_squared,
}
# Gated feed-forwards (Shazeer, 2020, "GLU Variants Improve Transformer"): act(gate) * up.
GATED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"swiglu": F.silu, "geglu": F.gelu, "geglu-tanh": gelu_tanh}
MLP_KINDS = (*ACTIVATIONS, *GATED)


class FeedForward(nn.Module):
    """Position-wise: Linear(C, d_ff) -> activation -> Linear(d_ff, C), the same at every token.

    ``mlp`` names the activation ("relu", "gelu", "gelu-tanh", "relu2") or a gated
    kind ("swiglu": SiLU, "geglu": exact GELU, "geglu-tanh": its tanh form, Gemma's). A gated ``up`` is one
    Linear(C, 2 d_ff) whose first d_ff outputs are the gate and the next d_ff the
    up projection; the hidden values are act(gate) * up.

    Hook points: ``hidden`` (B, T, d_ff), after the activation (and the gate), and ``output`` (B, T, C)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, mlp: str = "relu", bias: bool = True):
        super().__init__()
        if mlp not in MLP_KINDS:
            raise ValueError(f"unknown mlp '{mlp}' (known: {', '.join(MLP_KINDS)})")
        self.gated = mlp in GATED
        self.up = nn.Linear(d_model, 2 * d_ff if self.gated else d_ff, bias=bias)
        self.hidden = HookPoint()
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = GATED[mlp] if self.gated else ACTIVATIONS[mlp]
        self.dropout = nn.Dropout(dropout)
        self.output = HookPoint()

    def forward(self, x):
        # On rows (B*T, C): the same products and bits as on (B, T, C), but under
        # torch.compile a 3-D activation made the backward keep ReLU's boolean
        # mask beside its output, and inductor's CPU code stores booleans far
        # more slowly than eager does, enough to make compiled training slower
        # than eager (benchmarks/bench_compile.py measures both).
        shape = x.shape
        up = self.up(x.reshape(-1, shape[-1]))
        if self.gated:
            gate, up = up.chunk(2, dim=-1)
            hidden = self.activation(gate) * up
        else:
            hidden = self.activation(up)
        if self.hidden.functions:  # hooks see (B, T, d_ff), as every other point is shaped
            hidden = self.hidden(hidden.view(*shape[:-1], -1)).reshape(hidden.shape)
        x = self.down(hidden).view(shape)
        # Dropout is the identity outside training: skipping the module call is
        # a measurable share of decoding one token at a time.
        return self.output(self.dropout(x) if self.training else x)


ATTENTION_BIAS = ("all", "qkv", "none")
NORM_PLACEMENTS = ("before", "after", "both")


class _Block(nn.Module):
    """``bias`` None keeps seed 000's mix (attention without biases, FFN and
    LayerNorm with them); True or False puts biases in every linear layer and
    LayerNorm or in none, as nanoGPT's ``bias`` setting does. ``attention_bias``
    ("all", "qkv": the query/key/value projection only, as Qwen2; "none")
    overrides it for the attention; ``layernorm_bias`` (when set) decides the
    LayerNorms' biases alone (StableLM's biased norms beside unbiased linears).
    ``mlp``, ``n_kv_head``, ``head_size``,
    ``qk_norm``, ``sliding_window``, ``attention_softcap`` and ``query_scale`` are
    FeedForward's and CausalSelfAttention's; ``experts`` makes the feed-forward a
    mixture of experts (experts.py) with ``experts_per_token``, ``expert_d_ff``,
    ``norm_topk_prob`` and ``shared_expert_d_ff``. ``norm_placement`` (pre-norm blocks):
    "before" normalises each sublayer's input; "after" its output instead, before the
    residual add (OLMo 2: no ``norm1``/``norm2``, ``post_attention_norm`` and
    ``post_feed_forward_norm`` instead); "both" does both (Gemma 2 and 3).
    ``residual_scale`` s multiplies each sublayer's output before the residual add,
    x + s f(x) (Granite's residual_multiplier).

    Hook points on the residual stream, (B, T, C): ``resid_pre`` (the block's
    input), ``resid_mid`` (after the attention update) and ``resid_post`` (the
    block's output); the attention's and feed-forward network's own are inside them."""

    residuals: tuple[str, ...]  # the ``residual`` settings the block's forward computes
    placements: tuple[str, ...]  # the ``norm_placement`` settings the block's forward computes
    norm1: nn.Module  # absent with norm_placement "after"
    norm2: nn.Module  # absent with residual "parallel-shared-norm" or norm_placement "after"
    post_attention_norm: nn.Module  # present with norm_placement "after" or "both"
    post_feed_forward_norm: nn.Module

    def __init__(
        self,
        d_model: int,
        n_head: int,
        d_ff: int | None = None,
        dropout: float = 0.0,
        norm: str = "layernorm",
        mlp: str = "relu",
        bias: bool | None = None,
        norm_eps: float | None = None,
        qk_norm: bool | str = False,
        n_kv_head: int | None = None,
        head_size: int | None = None,
        attention_bias: str | None = None,
        sliding_window: int | None = None,
        residual: str = "sequential",
        norm_placement: str = "before",
        attention_softcap: float | None = None,
        query_scale: float | None = None,
        residual_scale: float | None = None,
        experts: int | None = None,
        experts_per_token: int | None = None,
        expert_d_ff: int | None = None,
        norm_topk_prob: bool | None = None,
        shared_expert_d_ff: int | None = None,
        layernorm_bias: bool | None = None,
    ):
        super().__init__()
        if residual not in self.residuals:
            raise ValueError(
                f"{type(self).__name__} takes residual {' or '.join(map(repr, self.residuals))}, not {residual!r}"
            )
        if norm_placement not in self.placements:
            raise ValueError(
                f"{type(self).__name__} takes norm_placement {' or '.join(map(repr, self.placements))}, "
                f"not {norm_placement!r}"
            )
        if norm_placement != "before" and residual != "sequential":
            raise ValueError(f"norm_placement {norm_placement!r} takes residual 'sequential', not {residual!r}")
        self.norm_placement = norm_placement
        norms_in, norms_out = norm_placement != "after", norm_placement != "before"
        self.parallel = residual != "sequential"
        if attention_bias is None:
            attention_bias = "all" if bias else "none"
        if attention_bias not in ATTENTION_BIAS:
            raise ValueError(f"attention_bias is one of {', '.join(ATTENTION_BIAS)}, not {attention_bias!r}")
        norm_bias = bias is not False if layernorm_bias is None else layernorm_bias
        # Registered in the order a forward passes them: hook_point_names lists them so.
        self.resid_pre = HookPoint()
        if norms_in:
            self.norm1 = make_norm(norm, d_model, bias=norm_bias, eps=norm_eps)
        self.attention = CausalSelfAttention(
            d_model,
            n_head,
            dropout,
            bias=attention_bias == "all",
            qk_norm=qk_norm,
            n_kv_head=n_kv_head,
            head_size=head_size,
            qkv_bias=attention_bias != "none",
            sliding_window=sliding_window,
            norm_eps=norm_eps,
            softcap=attention_softcap,
            query_scale=query_scale,
        )
        # New modules only where a setting asks for them: today's checkpoints keep their tensor names.
        if norms_out:
            self.post_attention_norm = make_norm(norm, d_model, bias=norm_bias, eps=norm_eps)
        self.resid_mid = HookPoint()
        self.shared_norm = residual == "parallel-shared-norm"
        if not self.shared_norm and norms_in:  # one norm feeds both: no norm2 tensor at all
            self.norm2 = make_norm(norm, d_model, bias=norm_bias, eps=norm_eps)
        self.feed_forward: nn.Module
        if experts:
            if mlp not in MLP_KINDS:
                raise ValueError(f"unknown mlp '{mlp}' (known: {', '.join(MLP_KINDS)})")
            self.feed_forward = Experts(
                d_model,
                expert_d_ff or d_ff or 4 * d_model,
                experts,
                experts_per_token or 1,
                GATED[mlp] if mlp in GATED else ACTIVATIONS[mlp],
                mlp in GATED,
                norm_topk_prob is not False,
                shared_expert_d_ff,
                dropout,
            )
        else:
            self.feed_forward = FeedForward(d_model, d_ff or 4 * d_model, dropout, mlp, bias=bias is not False)
        if norms_out:
            self.post_feed_forward_norm = make_norm(norm, d_model, bias=norm_bias, eps=norm_eps)
        self.resid_post = HookPoint()
        self.residual_scale = residual_scale

    def scaled(self, update: torch.Tensor) -> torch.Tensor:
        """A sublayer's output as the residual add takes it."""
        return update if self.residual_scale is None else update * self.residual_scale


class PreNormBlock(_Block):
    """x + Attention(Norm(x)), then x + FFN(Norm(x)): the residual stream is never normalised.

    ``residual`` "parallel" reads both from the block's input instead, x +
    Attention(Norm1(x)) + FFN(Norm2(x)) (GPT-NeoX); "parallel-shared-norm" feeds
    one norm to both (GPT-J, Falcon: no norm2). ``resid_mid`` is then x +
    Attention(...), and replacing it does not change what the FFN reads."""

    residuals = ("sequential", "parallel", "parallel-shared-norm")
    placements = NORM_PLACEMENTS

    def forward(self, x, positions, encoding, need_weights: bool = False, cache=None):
        x = self.resid_pre(x)
        if self.norm_placement != "before":
            return self._normalised_outputs(x, positions, encoding, need_weights, cache)
        normed = self.norm1(x)
        update, weights = self.attention(normed, positions, encoding, need_weights, cache)
        if self.parallel:
            ffn_input = normed if self.shared_norm else self.norm2(x)
            x = self.resid_mid(x + self.scaled(update)) + self.scaled(self.feed_forward(ffn_input))
        else:
            x = self.resid_mid(x + self.scaled(update))
            x = x + self.scaled(self.feed_forward(self.norm2(x)))
        return self.resid_post(x), weights

    def _normalised_outputs(self, x, positions, encoding, need_weights, cache):
        # x + norm_out(f(norm_in(x))) per sublayer, norm_in only with "both".
        both = self.norm_placement == "both"
        update, weights = self.attention(self.norm1(x) if both else x, positions, encoding, need_weights, cache)
        x = self.resid_mid(x + self.scaled(self.post_attention_norm(update)))
        x = x + self.scaled(self.post_feed_forward_norm(self.feed_forward(self.norm2(x) if both else x)))
        return self.resid_post(x), weights


class PostNormBlock(_Block):
    """Norm(x + Attention(x)), then Norm(x + FFN(x)), as in the original Transformer (§3.1)."""

    residuals = ("sequential",)
    placements = ("before",)  # its norms sit after each residual add, always

    def forward(self, x, positions, encoding, need_weights: bool = False, cache=None):
        x = self.resid_pre(x)
        update, weights = self.attention(x, positions, encoding, need_weights, cache)
        x = self.resid_mid(self.norm1(x + self.scaled(update)))
        x = self.norm2(x + self.scaled(self.feed_forward(x)))
        return self.resid_post(x), weights
