"""One new token through the transformer and its KV cache, in as few operator calls as the arithmetic needs.

Decoding a small model is bound by the cost of each call, not by arithmetic:
through the blocks' own forward, a cached token of gpt-char-mini is hundreds
of aten calls and dozens of module calls (reshapes of (B, T, C) activations, the
cache's bookkeeping, nn.Module dispatch), and reading its weights once is a small
part of that time. For the blocks this package builds (pre-norm and post-norm, with the
zoo's attention and feed-forward) the same arithmetic is written out here on
(B, C) rows. Each norm, linear layer and activation is still that submodule's
own `forward`, and the logits are the blocks' own bit for bit
(tests/test_decoding.py, across blocks, norms, activations, biases and
encodings).

Anything else takes the blocks' own path: a third-party block, attention or
feed-forward, an encoding that biases attention scores, training mode (dropout),
a torch hook on any submodule, which calling `forward` directly would skip, or
a hook set on any hook point (zoo_core.plugin_api.hook_points), which the
written-out arithmetic never passes.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from torch.nn.modules import module as torch_module

from zoo_core.plugin_api.components import encoding_does
from zoo_core.plugin_api.hook_points import HookPoint

from ..blocks.attention import CausalSelfAttention, KVCache, normalise_heads
from ..blocks.blocks import FeedForward, PostNormBlock, PreNormBlock

_BLOCKS = (PreNormBlock, PostNormBlock)


# Here rather than in transformer.py: row_batch.py builds these caches too, and
# transformer.py imports row_batch (make_row_batch); one direction only.
class GenerationCache:
    """Every layer's KV cache plus the position the next token will take.

    There is deliberately no way to drop the oldest token: above the first
    layer, every cached key was computed while attending to it, so sliding the
    cache is not the same as cropping the window, even with relative positions.
    """

    def __init__(self, n_layer: int, capacity: int):
        self.layers = [KVCache(capacity) for _ in range(n_layer)]
        self.length = 0  # tokens cached so far
        # set by decoding.can_decode at the first single token; [] where decode does not apply
        self.decoding_modules: list | None = None


_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)


def _global_hooks() -> bool:
    # torch keeps hooks registered for every module (register_module_forward_hook
    # and friends) in these private dicts; there is no public way to ask. Should
    # a torch release rename one, the answer is "maybe": the blocks' own path.
    return any(getattr(torch_module, name, True) for name in _GLOBAL_HOOKS)


def _known_submodules(model) -> list[torch.nn.Module] | None:
    """Every submodule, when each block is one whose arithmetic `decode` writes out; else None."""
    if encoding_does(model.positions, "biases"):
        return None
    for block in model.blocks:
        if type(block) not in _BLOCKS:  # a third-party block may have no `attention` at all
            return None
        if type(block.attention) is not CausalSelfAttention or type(block.feed_forward) is not FeedForward:
            return None
    # Hook points are left out: torch's hooks never run on them, and whether one
    # of ours is set is a single look at HookPoint.active.
    return [m for m in model.modules() if m is not model and not isinstance(m, HookPoint)]


def can_decode(model, cache) -> bool:
    """Whether `decode` gives the model's own cached forward for the next token.

    The blocks are looked at once per cache (one sample); hooks and training
    mode at every token, as either may change between two tokens."""
    if cache.decoding_modules is None:
        cache.decoding_modules = _known_submodules(model) or []
    if not cache.decoding_modules or model.training or HookPoint.active or _global_hooks():
        return False
    for module in cache.decoding_modules:
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks:
            return False
    return True


def _attend(attention: CausalSelfAttention, x: torch.Tensor, positions, encoding, cache: KVCache) -> torch.Tensor:
    B, C = x.shape
    H, D = attention.n_head, attention.head_size
    # (B, C) -> (B, 3, H, 1, D): the new token's queries, keys and values, split as CausalSelfAttention splits them
    qkv = attention.qkv.forward(x).view(B, 3, H, 1, D)
    if attention.qk_norm:
        qkv = torch.cat([normalise_heads(qkv[:, :2]), qkv[:, 2:]], dim=1)
    q = qkv[:, 0]
    if encoding_does(encoding, "rotates"):
        q, k = encoding.rotate(q, qkv[:, 1], positions, positions)
        keys, values, _ = cache.append(k, qkv[:, 2], positions)
    else:
        keys, values = cache.append_keys_values(qkv[:, 1:].transpose(0, 1), positions)[0].unbind(0)
    # The newest token may see every cached one: no mask, as in CausalSelfAttention.
    y = F.scaled_dot_product_attention(q, keys, values)
    return attention.proj.forward(y.reshape(B, C))


def _feed_forward(feed_forward: FeedForward, x: torch.Tensor) -> torch.Tensor:
    return feed_forward.down.forward(feed_forward.activation(feed_forward.up.forward(x)))


def decode(model, idx: torch.Tensor, cache) -> torch.Tensor:
    """Logits (B, 1, V) of the one new token per row in ``idx`` (B, 1), whose
    keys and values are appended to ``cache`` (the model's GenerationCache).

    Call only where `can_decode(model, cache)` holds and the cache has room."""
    B = idx.shape[0]
    positions = torch.arange(cache.length, cache.length + 1, device=idx.device)
    x = model.token_embedding.forward(idx)
    if model._embeds_positions:
        x = model.positions.embed(x, positions)
    x = x.view(B, -1)
    encoding = model.positions
    for block, layer_cache in zip(model.blocks, cache.layers):
        if type(block) is PreNormBlock:
            x = x + _attend(block.attention, block.norm1.forward(x), positions, encoding, layer_cache)
            x = x + _feed_forward(block.feed_forward, block.norm2.forward(x))
        else:  # PostNormBlock
            x = block.norm1.forward(x + _attend(block.attention, x, positions, encoding, layer_cache))
            x = block.norm2.forward(x + _feed_forward(block.feed_forward, x))
    cache.length += 1
    return model.cap_logits(model.lm_head.forward(model.final_norm.forward(x))).unsqueeze(1)
