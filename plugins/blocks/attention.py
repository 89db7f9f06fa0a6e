"""Causal self-attention that can show its weights and cache its keys, in the layouts the field uses.

One forward serves training, cached decoding and continuous batching (docs/plugins.md,
"The KV-cache contract"). ``positions`` are the queries' absolute positions: (T,)
for every row alike, or (B, T) when rows at different positions are decoded
together. A ``cache`` takes the new keys and values and hands back every key
the queries may look at with the keys' positions; which of them each query sees
is decided by position alone (no later key, none outside a sliding window), so
a cache may hand back slots nothing wrote yet at positions no query reaches.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from zoo_core.plugin_api.components import encoding_does
from zoo_core.plugin_api.hook_points import HookPoint

from .norms import make_norm

# qk_norm: none, unscaled, learned scales per head channel (stored as 1 + w: Gemma 3), over
# the whole projected width (OLMo 2), LayerNorm shared by the heads (Phi) or each head's own
QK_NORMS: tuple[bool | str, ...] = (
    False,
    True,
    "rmsnorm",
    "rmsnorm-unit-offset",
    "rmsnorm-whole",
    "layernorm",
    "layernorm-per-head",
)


class KVCache:
    """One layer's keys and values so far, (B, H, T, D), in the order they came.

    Sampling appends one token at a time instead of recomputing the whole window.
    Keys and values live side by side in one buffer, (2, B, H, capacity, D),
    allocated once for the whole window and filled in place: concatenating at
    every token copied the cache over and over. Tokens come in order from
    position 0 (`GenerationCache` feeds them so), so slot i holds position i.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.length = 0
        self.keys_values: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None  # every slot's position, 0 .. capacity - 1

    def append(self, k, v, positions):
        """Store the keys and values (B, H, T, D) of the next T tokens (at ``positions``,
        the next T); return all of them so far, (B, H, length, D) each, and their positions."""
        B, H, T, D = k.shape
        if self.keys_values is None:
            self.keys_values = k.new_empty(2, B, H, self.capacity, D)
            self.positions = torch.arange(self.capacity, device=positions.device)
        if self.length + T > self.capacity:
            raise ValueError(f"the KV cache holds {self.capacity} tokens; {self.length + T} do not fit")
        # narrow + copy_ rather than slice assignment: the same copy without
        # indexing's per-call work, which shows when decoding one token at a time
        slot = self.keys_values.narrow(3, self.length, T)
        slot[0].copy_(k)
        slot[1].copy_(v)
        self.length += T
        keys, values = self.keys_values.narrow(3, 0, self.length).unbind(0)
        return keys, values, self.positions.narrow(0, 0, self.length)


def normalise_heads(t: torch.Tensor) -> torch.Tensor:
    """RMS norm over each head's channels (the last dimension), without a learned scale."""
    return F.rms_norm(t, (t.shape[-1],))


def rotate_rows(encoding, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
    """``encoding.rotate`` for queries and keys (B, H, T, D) at ``positions`` (T,) or (B, T).

    An encoding works on one time axis (T,). Rows at positions of their own are
    laid end to end as one time axis, (1, H, B*T, D): an encoding that works
    position by position computes for each row what it would for the row alone."""
    if positions.dim() == 1:
        return encoding.rotate(q, k, positions, positions)
    B, T = positions.shape
    flat = positions.reshape(B * T)

    def laid(t):  # (B, H, T, D) -> (1, H, B*T, D)
        return t.transpose(0, 1).reshape(1, t.shape[1], B * T, t.shape[3])

    q, k = encoding.rotate(laid(q), laid(k), flat, flat)
    return (t.view(t.shape[1], B, T, t.shape[3]).transpose(0, 1) for t in (q, k))


def score_bias(encoding, positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """The encoding's additive score bias, (H, Tq, Tk), or (B, H, Tq, Tk) for rows at positions of their own."""
    if positions.dim() == 1:
        return encoding.bias(positions, k_positions)
    return torch.stack([encoding.bias(row, k_positions) for row in positions])


class HeadwiseLayerNorm(nn.Module):
    """LayerNorm over each head's channels whose weight is each head's own, (heads, D),
    without a bias: StableLM's and Cohere's query/key norm. Applied to (B, heads, T, D)."""

    def __init__(self, heads: int, head_size: int, eps: float | None = None):
        super().__init__()
        self.eps = 1e-5 if eps is None else eps
        self.weight = nn.Parameter(torch.ones(heads, head_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), eps=self.eps) * self.weight[:, None, :]


class CausalSelfAttention(nn.Module):
    """Heads side by side in one projection: (B, T, C) -> (B, T, C).

    ``qkv`` holds the query heads, then the key heads, then the value heads, as
    rows of one Linear(C, (n_head + 2 n_kv_head) head_size). ``n_kv_head`` below
    ``n_head`` shares each key/value head among n_head / n_kv_head query heads
    (grouped-query attention; 1 is multi-query attention); ``head_size`` need not
    be C / n_head (``proj`` is then Linear(n_head head_size, C)). ``bias`` puts
    biases in both projections, ``qkv_bias`` (when set) decides ``qkv``'s alone.

    With ``need_weights`` the scores are computed explicitly, softmaxed and
    returned (B, H, T, T); otherwise the same arithmetic goes through
    `scaled_dot_product_attention`, which is faster and gives the same numbers.
    The position encoding may rotate queries and keys or bias the scores.
    ``sliding_window`` W lets each query see itself and the W - 1 keys before it.
    ``qk_norm`` True RMS-normalises each head's queries and keys (no learned scale)
    before positions rotate them, as the nanoGPT speedrun does: the attention
    logits stay bounded however large the projections grow, which lets a high
    learning rate train without the softmax saturating. ``"rmsnorm"`` gives that
    norm a learned scale per head channel (``q_norm``, ``k_norm``, with ``norm_eps``);
    ``"rmsnorm-whole"`` normalises all of a token's queries together (and all its
    keys), over the whole projected width, with a scale per channel (OLMo 2).
    ``"layernorm"`` is a LayerNorm over each head's channels with a weight and bias the
    heads share (Phi), ``"layernorm-per-head"`` one whose weight is each head's own (StableLM, Cohere).
    ``"rmsnorm-unit-offset"`` stores that scale as w and scales by 1 + w (Gemma 3).
    ``query_scale`` multiplies the scores q.k instead of head_size**-0.5 (Gemma's
    query_pre_attn_scalar**-0.5); ``softcap`` C bounds them to C tanh(scores / C) before
    the mask (Gemma 2), which `scaled_dot_product_attention` cannot do: such a layer
    always computes its scores explicitly.

    Hook points: ``input`` (B, T, C), ``pattern`` (B, H, Tq, Tk), the softmaxed
    weights, ``heads`` (B, T, H, D), each head's output before the output
    projection, and ``output`` (B, T, C). The pattern is computed only when a
    hook is set on it (or ``need_weights``); a hook that keeps it leaves the
    output computed as without hooks, one that replaces it is attended through.
    """

    def __init__(
        self,
        d_model: int,
        n_head: int,
        dropout: float = 0.0,
        bias: bool = False,
        qk_norm: bool | str = False,
        *,
        n_kv_head: int | None = None,
        head_size: int | None = None,
        qkv_bias: bool | None = None,
        sliding_window: int | None = None,
        norm_eps: float | None = None,
        softcap: float | None = None,
        query_scale: float | None = None,
    ):
        super().__init__()
        n_kv_head = n_head if n_kv_head is None else n_kv_head
        if n_kv_head < 1 or n_head % n_kv_head:
            raise ValueError(f"{n_head} query heads do not share {n_kv_head} key/value heads evenly")
        if head_size is None:
            if d_model % n_head:
                raise ValueError(f"width {d_model} is not divisible by {n_head} heads")
            head_size = d_model // n_head
        if qk_norm not in QK_NORMS:
            raise ValueError(f"qk_norm is one of {', '.join(map(repr, QK_NORMS))}, not {qk_norm!r}")
        if sliding_window is not None and sliding_window < 1:
            raise ValueError(f"a sliding window holds at least 1 token, not {sliding_window}")
        self.n_head, self.n_kv_head, self.head_size = n_head, n_kv_head, head_size
        self.input = HookPoint()  # hook points registered in the order a forward passes them
        self.qkv = nn.Linear(d_model, (n_head + 2 * n_kv_head) * head_size, bias=bias if qkv_bias is None else qkv_bias)
        self.q_norm: nn.Module
        self.k_norm: nn.Module
        if qk_norm in ("rmsnorm", "rmsnorm-unit-offset"):
            self.q_norm = make_norm(qk_norm, head_size, eps=norm_eps)
            self.k_norm = make_norm(qk_norm, head_size, eps=norm_eps)
        elif qk_norm == "rmsnorm-whole":
            self.q_norm = nn.RMSNorm(n_head * head_size, eps=norm_eps)
            self.k_norm = nn.RMSNorm(n_kv_head * head_size, eps=norm_eps)
        elif qk_norm == "layernorm":
            self.q_norm = nn.LayerNorm(head_size, eps=1e-5 if norm_eps is None else norm_eps)
            self.k_norm = nn.LayerNorm(head_size, eps=1e-5 if norm_eps is None else norm_eps)
        elif qk_norm == "layernorm-per-head":
            self.q_norm = HeadwiseLayerNorm(n_head, head_size, norm_eps)
            self.k_norm = HeadwiseLayerNorm(n_kv_head, head_size, norm_eps)
        self.pattern = HookPoint()
        self.heads = HookPoint()
        self.proj = nn.Linear(n_head * head_size, d_model, bias=bias)
        self.dropout = dropout
        self.residual_dropout = nn.Dropout(dropout)
        self.output = HookPoint()
        self.qk_norm = qk_norm
        self.sliding_window = sliding_window
        self.softcap, self.query_scale = softcap, query_scale
        self._heads = (n_head, n_kv_head, n_kv_head)
        self._split = tuple(heads * head_size for heads in self._heads)

    def forward(self, x, positions, encoding, need_weights: bool = False, cache=None):
        x = self.input(x)
        B, T, _ = x.shape
        D = self.head_size
        projected = self.qkv(x)
        if self.qk_norm == "rmsnorm-whole":  # before the heads are split: each norm spans all of them
            q, k, v = projected.split_with_sizes(self._split, dim=-1)
            projected = torch.cat((self.q_norm(q), self.k_norm(k), v), dim=-1)
        if T == 1:  # one token per row (decoding): its heads are (B, heads, 1, D) views as it stands
            q, k, v = projected.view(B, -1, 1, D).split_with_sizes(self._heads, dim=1)
        else:
            # (B, H, T, D) each. Split along the channels, then give each its heads: in the
            # backward pass the three gradients are joined by one concatenation, where
            # viewing all three as (B, T, 3, H, D) would stack them and then copy the stack.
            q, k, v = (t.view(B, T, -1, D).transpose(1, 2) for t in projected.split_with_sizes(self._split, dim=2))
        if self.qk_norm in ("rmsnorm", "rmsnorm-unit-offset", "layernorm", "layernorm-per-head"):
            q, k = self.q_norm(q), self.k_norm(k)
        elif self.qk_norm is True:
            q, k = normalise_heads(q), normalise_heads(k)
        if encoding_does(encoding, "rotates"):  # most encodings do not: skip the identity call
            q, k = rotate_rows(encoding, q, k, positions)  # new keys rotate before joining the cache
        k_positions = positions
        if cache is not None:
            k, v, k_positions = cache.append(k, v, positions)
        # (H, Tq, Tk), (B, H, Tq, Tk) or None
        bias = score_bias(encoding, positions, k_positions) if encoding_does(encoding, "biases") else None
        dropout = self.dropout if self.training else 0.0
        grouped = self.n_kv_head != self.n_head
        Tk = k.shape[2]
        window = self.sliding_window if self.sliding_window is not None and Tk > self.sliding_window else None
        # The common cases need no mask tensor at all: queries and keys are the same
        # tokens (training, or filling an empty cache), or a single newest query
        # that may see every cached key (decoding one sequence).
        shared = bias is None and window is None and positions.dim() == 1  # one mask for every row
        plain_causal = shared and Tk == T
        sees_everything = shared and T == 1
        # `functions`: the cheapest look at the point
        explicit = need_weights or bool(self.pattern.functions) or self.softcap is not None
        if explicit or not (plain_causal or sees_everything):
            seen_from = positions[..., None]  # (Tq, 1) or (B, Tq, 1)
            allowed = k_positions <= seen_from  # no looking ahead
            if window is not None:
                allowed = allowed & (k_positions > seen_from - window)
            if allowed.dim() == 3:  # a mask per row, the same for every head
                allowed = allowed[:, None]
        weights = y = None
        if explicit:
            if grouped:
                k, v = (t.repeat_interleave(self.n_head // self.n_kv_head, dim=1) for t in (k, v))
                grouped = False
            scores = (q @ k.transpose(-2, -1)) * (D**-0.5 if self.query_scale is None else self.query_scale)
            if self.softcap is not None:
                scores = self.softcap * torch.tanh(scores / self.softcap)
            if bias is not None:
                scores = scores + bias
            computed = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            seen = self.pattern(computed)
            # A hook that only reads the pattern leaves the output as fast and
            # bit for bit as without it; a replaced pattern is what is attended through.
            if need_weights or seen is not computed or self.softcap is not None:
                y = F.dropout(seen, dropout, self.training) @ v
            if need_weights:
                weights = seen
        if y is None:
            if plain_causal:
                y = F.scaled_dot_product_attention(
                    q, k, v, is_causal=True, dropout_p=dropout, scale=self.query_scale, enable_gqa=grouped
                )
            elif sees_everything:
                y = F.scaled_dot_product_attention(
                    q, k, v, dropout_p=dropout, scale=self.query_scale, enable_gqa=grouped
                )
            else:
                mask = allowed
                if bias is not None:
                    mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(
                        ~allowed, float("-inf")
                    )
                    mask = mask + bias.to(q.dtype)
                y = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, dropout_p=dropout, scale=self.query_scale, enable_gqa=grouped
                )
        y = self.proj(self.heads(y.transpose(1, 2)).reshape(B, T, -1))  # (B, T, H, D), then side by side again
        if self.training:  # dropout is the identity outside training: no call
            y = self.residual_dropout(y)
        return self.output(y), weights
