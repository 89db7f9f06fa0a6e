"""TransformerLens: a variant as a `HookedTransformer`, built in memory or written to a folder.

TransformerLens 3.x (the last line with `HookedTransformer`; 4.0 removed it in
favour of `TransformerBridge`, which wraps a transformers model) takes a
config built by hand and a state dict, so nothing is downloaded: the
config names no pretrained model and no tokenizer to fetch, and the tokenizer
given is the zoo's own, converted as for `zoo export --format hf`.

What maps: ``transformer`` and ``gpt`` variants with pre-norm blocks, LayerNorm
or RMSNorm, positions added to the input (learned; sinusoidal, written as the
learned table of positions 0…context−1; none, a table of zeros) or rotary
(adjacent pairs, any base, partial, Llama 3's scaling), ReLU, ReLU², GELU, tanh
GELU, SwiGLU or GeGLU, grouped key/value heads, a head size of its own,
sequential or parallel residuals, a sliding window ("local" attention), QK-norm
(with or without learned scales) and a logit soft-cap: the layouts of Llama,
Mistral, Qwen and GPT-NeoX (docs/interop.md). Unlike GPT-2, TransformerLens' unembedding
has a bias, so the zoo's vocabulary head maps one to one (no extra channels).
Refused, by name: post-norm blocks, score-biasing position encodings, other
architectures.
"""

from __future__ import annotations

import json
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..errors import ZooError
from ..loading.api import load
from ..plugin_api.components import PositionEncodingBase
from .hf import PAD_TOKEN_ID, family_layout, quiet_transformers, transformer_layout, verification_ids
from .hf_tokenizers import hf_tokenizer_for

LOGIT_TOLERANCE = 1e-4
# The zoo's activation names and TransformerLens' for the same function.
TL_ACTIVATIONS = {
    "relu": "relu",
    "relu2": "relu2",
    "gelu": "gelu",
    "gelu-tanh": "gelu_new",
    "swiglu": "silu",
    "geglu": "gelu",
}
GATED = ("swiglu", "geglu")
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def _require_transformer_lens():
    try:
        import transformer_lens  # noqa: F401
    except ImportError:
        raise ZooError("TransformerLens export needs transformer_lens: pip install 'zoo-lm[lens]'") from None


def transformer_lens_refusal(model) -> str | None:
    """Why the variant has no exact `HookedTransformer` form, or None when it has one."""
    card, network = model.card, model.network
    config = transformer_layout(card)
    name = card.name
    if card.architecture not in ("transformer", "gpt"):
        return f"'{name}' is a {card.architecture} model; only transformer and gpt variants map onto HookedTransformer"
    if config["block"] != "pre-norm":
        return f"'{name}' has {config['block']} blocks; HookedTransformer normalises before each sublayer only"
    if config["norm"] not in ("layernorm", "rmsnorm"):
        return f"'{name}': norm '{config['norm']}' has no HookedTransformer counterpart"
    encoding = type(network.positions)
    if encoding.bias is not PositionEncodingBase.bias:
        return f"'{name}': position encoding '{config['positions']}' biases attention scores; HookedTransformer has no such step"
    if encoding.rotate is not PositionEncodingBase.rotate and config["positions"] != "rope":
        return f"'{name}': position encoding '{config['positions']}' rotates queries and keys in its own way; only the zoo's rope maps"
    if config.get("mlp", "relu") not in TL_ACTIVATIONS:
        return f"'{name}': mlp '{config['mlp']}' has no HookedTransformer counterpart"
    if config.get("embedding_scale") not in (None, 1, 1.0):
        return f"'{name}' scales its embeddings (embedding_scale); HookedTransformer has no such step"
    if (config.get("rope_scaling") or {}).get("kind", "llama3") != "llama3":
        return f"'{name}': rope_scaling '{config['rope_scaling']['kind']}'; HookedTransformer scales RoPE as Llama 3 does only"
    if config.get("mlp") in GATED and "blocks.0.feed_forward.up.bias" in network.state_dict():
        return f"'{name}' has a bias on its feed-forward gate; HookedTransformer's gated MLP has none"
    return None


def hooked_transformer_config(model) -> dict:
    """The `HookedTransformerConfig` fields (plain JSON values) of the variant.
    Grouped key/value heads are counted as TransformerLens counts them:
    ``n_heads`` query heads, ``n_key_value_heads`` shared."""
    card, network = model.card, model.network
    config = family_layout(model)
    rms = config["norm"] == "rmsnorm"
    mlp = config["mlp"]
    fields = dict(
        model_name=card.name,
        d_model=config["d_model"],
        d_head=config["head_size"],
        n_heads=config["n_head"],
        n_layers=config["n_layer"],
        n_ctx=card.context_length,
        d_vocab=network.lm_head.weight.shape[0],
        d_mlp=config["d_ff"],
        act_fn=TL_ACTIVATIONS[mlp],
        normalization_type="RMS" if rms else "LN",
        eps=config["norm_eps"],
        positional_embedding_type="rotary" if config["positions"] == "rope" else "standard",
        default_prepend_bos=False,  # the zoo's models have no beginning-of-text token
        tokenizer_prepends_bos=False,
        init_weights=False,  # every weight is loaded; no random initialisation to spend time on
        device="cpu",
    )
    if config["n_kv_head"] != config["n_head"]:
        fields["n_key_value_heads"] = config["n_kv_head"]
    if mlp in GATED:
        fields["gated_mlp"] = True
    if config["residual"] != "sequential":  # parallel-shared-norm: ln2 is given ln1's weights
        fields["parallel_attn_mlp"] = True
    if config["positions"] == "rope":
        rotary = round(config.get("rotary_fraction", 1.0) * config["head_size"])
        fields.update(rotary_dim=rotary, rotary_adjacent_pairs=True, rotary_base=config.get("rope_base", 10000.0))
        scaling = config.get("rope_scaling")
        if scaling:
            fields.update(
                use_NTK_by_parts_rope=True,
                NTK_by_parts_factor=scaling["factor"],
                NTK_by_parts_low_freq_factor=scaling["low_freq_factor"],
                NTK_by_parts_high_freq_factor=scaling["high_freq_factor"],
                NTK_original_ctx_len=scaling["original_context_length"],
            )
    if config.get("sliding_window"):
        fields.update(
            use_local_attn=True, attn_types=["local"] * config["n_layer"], window_size=config["sliding_window"]
        )
    if config.get("qk_norm"):
        fields["use_qk_norm"] = True
    if network.logit_softcap is not None:
        fields["output_logits_soft_cap"] = float(network.logit_softcap)
    return fields


def hooked_transformer_state(network, fields: dict) -> dict:
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

    state = {"embed.W_E": zoo["token_embedding.weight"]}
    if fields["positional_embedding_type"] == "standard":
        with torch.no_grad():
            table = network.positions.embed(torch.zeros(1, fields["n_ctx"], d_model), torch.arange(fields["n_ctx"]))[0]
        state["pos_embed.W_pos"] = table.to(torch.float32)
    n_kv = fields.get("n_key_value_heads", n_heads)
    shared = "_" if "n_key_value_heads" in fields else ""  # TransformerLens keeps grouped K and V unexpanded
    split = [n_heads * d_head, n_kv * d_head, n_kv * d_head]
    for i in range(fields["n_layers"]):
        ours, theirs = f"blocks.{i}", f"blocks.{i}"
        state.update(norm(f"{theirs}.ln1", f"{ours}.norm1"))
        state.update(norm(f"{theirs}.ln2", f"{ours}.norm2" if f"{ours}.norm2.weight" in zoo else f"{ours}.norm1"))
        qkv = zoo[f"{ours}.attention.qkv.weight"].split(split)  # queries, keys, values, heads side by side
        qkv_bias = zoo.get(f"{ours}.attention.qkv.bias", torch.zeros(sum(split))).split(split)
        for part, weight, bias in zip("QKV", qkv, qkv_bias):
            prefix = "" if part == "Q" else shared
            state[f"{theirs}.attn.{prefix}W_{part}"] = per_head_in(weight)
            state[f"{theirs}.attn.{prefix}b_{part}"] = bias.view(-1, d_head)
        proj = zoo[f"{ours}.attention.proj.weight"]  # (C, H*D)
        state[f"{theirs}.attn.W_O"] = proj.T.reshape(n_heads, d_head, d_model).contiguous()
        state[f"{theirs}.attn.b_O"] = zoo.get(f"{ours}.attention.proj.bias", torch.zeros(d_model))
        if fields.get("use_qk_norm"):  # learned scales (qk_norm "rmsnorm"), or none: ones
            for which in ("q_norm", "k_norm"):
                state[f"{theirs}.attn.{which}.w"] = zoo.get(f"{ours}.attention.{which}.weight", torch.ones(d_head))
        up = zoo[f"{ours}.feed_forward.up.weight"]  # (d_ff, C), or (2 d_ff, C): gate, then up
        d_mlp = fields["d_mlp"]
        if fields.get("gated_mlp"):
            state[f"{theirs}.mlp.W_gate"] = up[:d_mlp].T.contiguous()
            up = up[d_mlp:]
        state[f"{theirs}.mlp.W_in"] = up.T.contiguous()
        state[f"{theirs}.mlp.b_in"] = zoo.get(f"{ours}.feed_forward.up.bias", torch.zeros(d_mlp))
        state[f"{theirs}.mlp.W_out"] = zoo[f"{ours}.feed_forward.down.weight"].T.contiguous()
        state[f"{theirs}.mlp.b_out"] = zoo.get(f"{ours}.feed_forward.down.bias", torch.zeros(d_model))
    state.update(norm("ln_final", "final_norm"))
    state["unembed.W_U"] = zoo["lm_head.weight"].T.contiguous()
    state["unembed.b_U"] = zoo.get("lm_head.bias", torch.zeros(fields["d_vocab"]))
    return state


@contextmanager
def _quiet_construction():
    """HookedTransformer's constructor warns that the class is deprecated (in 3.x,
    pointing to 4.0's TransformerBridge); that is TransformerLens' news, not the user's."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*HookedTransformer is deprecated.*")
        yield


def _tokenizer(model):
    """The zoo tokenizer as a transformers tokenizer, or None where none maps."""
    try:
        tokenizer = hf_tokenizer_for(model.tokenizer, model.card.context_length)
    except ZooError:
        return None
    # TransformerLens pads every call to its tokenizer, which needs a pad token
    # with an id; the zoo has no special tokens, so padding uses id 0. Only the
    # padded positions of a ragged batch carry it, and TransformerLens masks those.
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(PAD_TOKEN_ID)
    return tokenizer


def hooked_transformer(model_or_name):
    """A `transformer_lens.HookedTransformer` computing the variant's logits, converted
    in memory (nothing is downloaded), with the zoo's tokenizer where it maps to a
    transformers one. ``model_or_name`` is a loaded `ZooModel` or a variant name."""
    _require_transformer_lens()
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    model = model_or_name
    if isinstance(model_or_name, str):
        model = load(model_or_name, merge_adapter=True)
    refusal = transformer_lens_refusal(model)
    if refusal:
        raise ZooError(f"cannot convert to TransformerLens: {refusal}")
    try:
        fields = hooked_transformer_config(model)
        state = hooked_transformer_state(model.network, fields)
    except (KeyError, AttributeError) as exc:  # a plugin's block with other tensor names
        raise ZooError(
            f"cannot convert to TransformerLens: '{model.name}' is not laid out like the zoo's transformer (no {exc})"
        ) from None
    with _quiet_construction():
        lens = HookedTransformer(HookedTransformerConfig(**fields), tokenizer=_tokenizer(model), move_to_device=False)
    missing, unexpected = lens.load_state_dict(state, strict=False)
    # TransformerLens' own buffers (its causal mask, rotary tables) are not weights.
    missing = [name for name in missing if not name.endswith((".mask", ".IGNORE", ".rotary_sin", ".rotary_cos"))]
    if missing or unexpected:
        raise ZooError(f"TransformerLens layout mismatch: missing {missing}, unexpected {unexpected}")
    return lens.eval()


def load_exported(folder: Path):
    """What the documented snippet does: the `HookedTransformer` a `zoo export
    --format transformer-lens` folder describes."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformers import AutoTokenizer

    config = HookedTransformerConfig(**json.loads((folder / CONFIG_FILE).read_text()))
    tokenizer = AutoTokenizer.from_pretrained(folder) if (folder / "tokenizer.json").exists() else None
    with _quiet_construction():
        lens = HookedTransformer(config, tokenizer=tokenizer)
    lens.load_state_dict(load_file(folder / WEIGHTS_FILE), strict=False)
    return lens.eval()


def export_transformer_lens(model, out: Path) -> tuple[list[Path], dict]:
    """Write ``out``: ``config.json`` (`HookedTransformerConfig` fields),
    ``model.safetensors`` (TransformerLens' state dict), the tokenizer files
    `AutoTokenizer` loads, and ``zoo_card.json``; then load it back as the
    documented snippet does and check its logits against the zoo's (1e-4)."""
    lens = hooked_transformer(model)
    quiet_transformers()
    fields = hooked_transformer_config(model)
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).write_text(json.dumps(fields, indent=2) + "\n")
    weights = {name: tensor.contiguous() for name, tensor in hooked_transformer_state(model.network, fields).items()}
    save_file(weights, str(out / WEIGHTS_FILE))
    if lens.tokenizer is not None:
        _tokenizer(model).save_pretrained(out)
    (out / "zoo_card.json").write_text(
        json.dumps(model.card.model_dump(mode="json", exclude_none=True), indent=2) + "\n"
    )
    ids, _ = verification_ids(model)
    loaded = load_exported(out)
    with torch.no_grad():
        theirs = loaded(torch.tensor([ids]))
        ours, _ = model.network(torch.tensor([ids]))
    difference = float((theirs - ours).abs().max())
    if difference > LOGIT_TOLERANCE:
        raise ZooError(
            f"TransformerLens logits differ from the zoo's by {difference:.2e} (> {LOGIT_TOLERANCE}); nothing usable was written"
        )
    checks = {"max_logit_difference": difference, "logit_tokens": len(ids)}
    return sorted(path for path in out.iterdir() if path.is_file()), checks
