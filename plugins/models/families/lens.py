"""How TransformerLens names the transformer's parts: `HookedTransformerConfig`
fields and its state dict, for every family alike.

What maps: pre-norm blocks, LayerNorm or RMSNorm, positions added to the input
(learned; sinusoidal, written as the learned table of positions 0…context−1;
none, a table of zeros) or rotary (adjacent pairs, any base, partial, Llama 3's
scaling), ReLU, ReLU², GELU, tanh GELU, SwiGLU or GeGLU, grouped key/value
heads, a head size of its own, sequential or parallel residuals, a sliding
window ("local" attention), QK-norm (with or without learned scales) and a
logit soft-cap. Unlike GPT-2, TransformerLens' unembedding has a bias, so the
zoo's vocabulary head maps one to one. Refused, by name: post-norm blocks,
score-biasing position encodings.
"""

from __future__ import annotations

import torch

from zoo_core.plugin_api.components import PositionEncodingBase

from .layout import GATED_KINDS, LENS_ACTIVATIONS, card_layout, resolved, unmapped_setting


def refusal(model) -> str | None:
    """Why the variant has no exact `HookedTransformer` form, or None when it has one."""
    card, network = model.card, model.network
    config = card_layout(card)
    name = card.name
    if config["block"] != "pre-norm":
        return f"'{name}' has {config['block']} blocks; HookedTransformer normalises before each sublayer only"
    routed = [hasattr(block.feed_forward, "router") for block in network.blocks]
    if any(routed) and not all(routed):
        return f"'{name}' has layers with experts and layers without; HookedTransformer's MoE is in every layer"
    if any(hasattr(block.feed_forward, "shared") for block in network.blocks):
        return f"'{name}' has a shared expert beside its experts (Qwen2-MoE's); HookedTransformer's MoE has none"
    if any(routed) and config.get("mlp") not in GATED_KINDS:
        return f"'{name}' has experts with a plain feed-forward; HookedTransformer's experts are gated"
    if config["norm"] not in ("layernorm", "rmsnorm"):
        return f"'{name}': norm '{config['norm']}' has no HookedTransformer counterpart"
    if unmapped_setting(config):
        return f"'{name}' sets {unmapped_setting(config)}, which HookedTransformer's blocks have no place for"
    if config.get("qk_norm") == "rmsnorm-whole":
        return f"'{name}' normalises queries and keys across all heads at once; HookedTransformer's QK-norm is per head"
    encoding = type(network.positions)
    if encoding.bias is not PositionEncodingBase.bias:
        return f"'{name}': position encoding '{config['positions']}' biases attention scores; HookedTransformer has no such step"
    if encoding.rotate is not PositionEncodingBase.rotate and config["positions"] != "rope":
        return f"'{name}': position encoding '{config['positions']}' rotates queries and keys in its own way; only the zoo's rope maps"
    if config.get("mlp", "relu") not in LENS_ACTIVATIONS:
        return f"'{name}': mlp '{config['mlp']}' has no HookedTransformer counterpart"
    if config.get("embedding_scale") not in (None, 1, 1.0):
        return f"'{name}' scales its embeddings (embedding_scale); HookedTransformer has no such step"
    if config.get("logit_scale") not in (None, 1, 1.0):
        return f"'{name}' scales its logits (logit_scale); HookedTransformer has no such step"
    if (config.get("rope_scaling") or {}).get("kind", "llama3") != "llama3":
        return f"'{name}': rope_scaling '{config['rope_scaling']['kind']}'; HookedTransformer scales RoPE as Llama 3 does only"
    if config.get("qk_norm") in ("layernorm", "layernorm-per-head"):
        return f"'{name}' LayerNorms each head's queries and keys (qk_norm); HookedTransformer's QK-norm is an RMSNorm"
    if config.get("mlp") in GATED_KINDS and "blocks.0.feed_forward.up.bias" in network.state_dict():
        return f"'{name}' has a bias on its feed-forward gate; HookedTransformer's gated MLP has none"
    return None


def config(model) -> dict:
    """The `HookedTransformerConfig` fields (plain JSON values) of the variant.
    Grouped key/value heads are counted as TransformerLens counts them:
    ``n_heads`` query heads, ``n_key_value_heads`` shared."""
    card, network = model.card, model.network
    layout = resolved(model)
    rms = layout["norm"] == "rmsnorm"
    mlp = layout["mlp"]
    fields = dict(
        model_name=card.name,
        d_model=layout["d_model"],
        d_head=layout["head_size"],
        n_heads=layout["n_head"],
        n_layers=layout["n_layer"],
        n_ctx=card.context_length,
        d_vocab=network.lm_head.weight.shape[0],
        d_mlp=layout["d_ff"],
        act_fn=LENS_ACTIVATIONS[mlp],
        normalization_type="RMS" if rms else "LN",
        eps=layout["norm_eps"],
        positional_embedding_type="rotary" if layout["positions"] == "rope" else "standard",
        default_prepend_bos=False,  # the zoo's models have no beginning-of-text token
        tokenizer_prepends_bos=False,
        init_weights=False,  # every weight is loaded; no random initialisation to spend time on
        device="cpu",
    )
    if layout["n_kv_head"] != layout["n_head"]:
        fields["n_key_value_heads"] = layout["n_kv_head"]
    experts = getattr(network.blocks[0].feed_forward, "experts_down", None)
    if experts is not None:  # Mixtral's MoE (TransformerLens' MoE, one MoEGatedMLP per expert)
        fields.update(
            num_experts=experts.weight.shape[0],
            experts_per_token=network.blocks[0].feed_forward.per_token,
            norm_topk_prob=layout.get("norm_topk_prob") is not False,
            d_mlp=experts.weight.shape[2],
        )
    if mlp in GATED_KINDS:
        fields["gated_mlp"] = True
    if layout["residual"] != "sequential":  # parallel-shared-norm: ln2 is given ln1's weights
        fields["parallel_attn_mlp"] = True
    if layout["positions"] == "rope":
        rotary = round(layout.get("rotary_fraction", 1.0) * layout["head_size"])
        fields.update(rotary_dim=rotary, rotary_adjacent_pairs=True, rotary_base=layout.get("rope_base", 10000.0))
        scaling = layout.get("rope_scaling")
        if scaling:
            fields.update(
                use_NTK_by_parts_rope=True,
                NTK_by_parts_factor=scaling["factor"],
                NTK_by_parts_low_freq_factor=scaling["low_freq_factor"],
                NTK_by_parts_high_freq_factor=scaling["high_freq_factor"],
                NTK_original_ctx_len=scaling["original_context_length"],
            )
    if layout.get("sliding_window"):
        fields.update(
            use_local_attn=True, attn_types=["local"] * layout["n_layer"], window_size=layout["sliding_window"]
        )
    if layout.get("qk_norm"):
        fields["use_qk_norm"] = True
    if network.logit_softcap is not None:
        fields["output_logits_soft_cap"] = float(network.logit_softcap)
    return fields


def state(network, fields: dict) -> dict:
    """The zoo network's tensors under TransformerLens' names and shapes."""
    zoo = {name: tensor.detach().to(torch.float32) for name, tensor in network.state_dict().items()}
    d_model, n_heads, d_head = fields["d_model"], fields["n_heads"], fields["d_head"]
    rms = fields["normalization_type"] == "RMS"

    def norm(theirs: str, ours: str) -> dict:
        out = {f"{theirs}.w": zoo[f"{ours}.weight"]}
        if not rms:
            out[f"{theirs}.b"] = zoo.get(f"{ours}.bias", torch.zeros(d_model))
        return out

    def per_head_in(weight):  # Linear (H*D, C) -> (H, C, D)
        return weight.view(-1, d_head, d_model).transpose(1, 2).contiguous()

    out = {"embed.W_E": zoo["token_embedding.weight"]}
    if fields["positional_embedding_type"] == "standard":
        with torch.no_grad():
            table = network.positions.embed(torch.zeros(1, fields["n_ctx"], d_model), torch.arange(fields["n_ctx"]))[0]
        out["pos_embed.W_pos"] = table.to(torch.float32)
    n_kv = fields.get("n_key_value_heads", n_heads)
    shared = "_" if "n_key_value_heads" in fields else ""  # TransformerLens keeps grouped K and V unexpanded
    split = [n_heads * d_head, n_kv * d_head, n_kv * d_head]
    for i in range(fields["n_layers"]):
        ours, theirs = f"blocks.{i}", f"blocks.{i}"
        out.update(norm(f"{theirs}.ln1", f"{ours}.norm1"))
        if f"{ours}.norm2.weight" in zoo:
            out.update(norm(f"{theirs}.ln2", f"{ours}.norm2"))
        else:  # parallel-shared-norm: ln2 is a copy of ln1 (safetensors writes no tensor twice)
            out.update({k: v.clone() for k, v in norm(f"{theirs}.ln2", f"{ours}.norm1").items()})
        qkv = zoo[f"{ours}.attention.qkv.weight"].split(split)  # queries, keys, values, heads side by side
        qkv_bias = zoo.get(f"{ours}.attention.qkv.bias", torch.zeros(sum(split))).split(split)
        for part, weight, bias in zip("QKV", qkv, qkv_bias):
            prefix = "" if part == "Q" else shared
            out[f"{theirs}.attn.{prefix}W_{part}"] = per_head_in(weight)
            out[f"{theirs}.attn.{prefix}b_{part}"] = bias.view(-1, d_head)
        proj = zoo[f"{ours}.attention.proj.weight"]  # (C, H*D)
        out[f"{theirs}.attn.W_O"] = proj.T.reshape(n_heads, d_head, d_model).contiguous()
        out[f"{theirs}.attn.b_O"] = zoo.get(f"{ours}.attention.proj.bias", torch.zeros(d_model))
        if fields.get("use_qk_norm"):  # learned scales (qk_norm "rmsnorm"), or none: ones
            for which in ("q_norm", "k_norm"):
                out[f"{theirs}.attn.{which}.w"] = zoo.get(f"{ours}.attention.{which}.weight", torch.ones(d_head))
        d_mlp = fields["d_mlp"]
        if fields.get("num_experts"):  # each expert's gate rows, then its up rows
            out[f"{theirs}.mlp.W_gate.weight"] = zoo[f"{ours}.feed_forward.router.weight"]
            downs = zoo[f"{ours}.feed_forward.experts_down.weight"]
            for e, up in enumerate(zoo[f"{ours}.feed_forward.experts_up.weight"]):
                out[f"{theirs}.mlp.experts.{e}.W_gate.weight"] = up[:d_mlp].contiguous()
                out[f"{theirs}.mlp.experts.{e}.W_in.weight"] = up[d_mlp:].contiguous()
                out[f"{theirs}.mlp.experts.{e}.W_out.weight"] = downs[e].contiguous()
            continue
        up = zoo[f"{ours}.feed_forward.up.weight"]  # (d_ff, C), or (2 d_ff, C): gate, then up
        if fields.get("gated_mlp"):
            out[f"{theirs}.mlp.W_gate"] = up[:d_mlp].T.contiguous()
            up = up[d_mlp:]
        out[f"{theirs}.mlp.W_in"] = up.T.contiguous()
        out[f"{theirs}.mlp.b_in"] = zoo.get(f"{ours}.feed_forward.up.bias", torch.zeros(d_mlp))
        out[f"{theirs}.mlp.W_out"] = zoo[f"{ours}.feed_forward.down.weight"].T.contiguous()
        out[f"{theirs}.mlp.b_out"] = zoo.get(f"{ours}.feed_forward.down.bias", torch.zeros(d_model))
    out.update(norm("ln_final", "final_norm"))
    out["unembed.W_U"] = zoo["lm_head.weight"].T.contiguous()
    out["unembed.b_U"] = zoo.get("lm_head.bias", torch.zeros(fields["d_vocab"]))
    return out
