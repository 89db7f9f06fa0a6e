"""The card reference, generated from the Pydantic card models themselves.

`zoo card-schema` prints the JSON Schema; `zoo card-schema --markdown` prints
`docs/cards.md` (a test keeps that file in step with the models), so the
reference can never describe fields the zoo does not read.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .cards import (
    AdapterSpec,
    CheckpointRef,
    ComponentSource,
    Metrics,
    ModelCard,
    Origin,
    Recipe,
    TokenizerSpec,
    defines_weights,
)

SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("the variant's table, `[NAME]`", ModelCard),
    ("`[NAME.tokenizer]`", TokenizerSpec),
    ("`[NAME.recipe]`", Recipe),
    ("`[NAME.checkpoint]`", CheckpointRef),
    ("`[NAME.metrics]`", Metrics),
    ("`[NAME.adapter]`", AdapterSpec),
    ("`[NAME.origin]`", Origin),
    ("`[NAME.components.ROLE]`", ComponentSource),
]


# The settings of the zoo's transformer (architectures 'transformer' and 'gpt'),
# written here so that `zoo card-schema --markdown` keeps them in docs/cards.md:
# the config field is a free table the card models cannot describe key by key.
TRANSFORMER_LAYOUTS = """## Transformer layouts

The `config` table of architectures `transformer` and `gpt` (`zoo_plugins/models/transformer.py`).
Every setting is optional; left out, it is what the zoo always built. A setting reaches the
block or the position encoding only when set, and one that the registered block or encoding
does not take by name is refused in one line (a block that swallows unknown keywords with
`**kwargs` takes none); an unknown key is refused at the model.

| setting | values | meaning |
|---|---|---|
| `d_model`, `n_layer`, `n_head`, `d_ff` | whole numbers | width, blocks, query heads, feed-forward width (default 4 `d_model`) |
| `n_kv_head` | divides `n_head`; default `n_head` | key/value heads: fewer is grouped-query attention, 1 multi-query. `attention.qkv` stays one Linear whose output rows are the query heads, then the key heads, then the value heads |
| `head_size` | default `d_model / n_head` | channels per head; `attention.proj` is Linear(`n_head` `head_size`, `d_model`) (Qwen3) |
| `mlp` | `relu` (default), `gelu` (exact), `gelu-tanh`, `relu2` (ReLU squared), `swiglu`, `geglu` | the feed-forward. Gated kinds: `feed_forward.up` is one Linear(`d_model`, 2 `d_ff`) whose first `d_ff` outputs are the gate and the next `d_ff` the up projection; hidden = act(gate) * up, act SiLU (`swiglu`) or exact GELU (`geglu`). Older cards' `activation` reads as `mlp` |
| `norm`, `norm_eps` | `layernorm` (default) or `rmsnorm`; epsilon (default torch's) | every norm, the final one too |
| `block` | `pre-norm` (default) or `post-norm` | where the norms sit |
| `residual` | `sequential` (default), `parallel`, `parallel-shared-norm` | `parallel`: x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX); `parallel-shared-norm`: one norm feeds both, no `norm2` (GPT-J, Falcon). Pre-norm blocks only |
| `layer_bias` | unset, true, false | unset: seed 000's mix (attention without biases, feed-forward and LayerNorm with); true or false: biases in every block linear and norm or in none |
| `attention_bias` | `all`, `qkv`, `none`; default follows `layer_bias` | `qkv`: bias on the query/key/value projection only (Qwen2) |
| `bias` | true (default), false | the vocabulary head's bias |
| `tie_embeddings` | false (default), true | the head reuses the token embedding |
| `embedding_scale` | a number | token embeddings are multiplied by it (Gemma: sqrt(`d_model`)) |
| `sliding_window` | W, whole number | each query sees itself and the W - 1 keys before it: key j is seen from query i when i - W < j <= i, as transformers' Mistral masks (`sliding_window_overlay`, kv_idx > q_idx - W) |
| `qk_norm` | false (default), true, `rmsnorm` | true: each head's queries and keys RMS-normalised without a scale (the speedrun); `rmsnorm`: with a learned scale per head channel, `attention.q_norm` and `attention.k_norm`, epsilon `norm_eps` (Qwen3, OLMo-2) |
| `positions` | `learned` (default), `sinusoidal`, `none`, `rope`, or a plugin's | where a token is |
| `rope_base` | default 10000 | RoPE's theta; only with `positions = "rope"` |
| `rope_scaling` | `{kind = "linear", factor = F}` or `{kind = "llama3", factor, low_freq_factor, high_freq_factor, original_context_length}` | stretched frequencies (Llama 3.1 / 3.2 use `llama3`) |
| `rotary_fraction` | in (0, 1], default 1 | only the first round(fraction `head_size`) channels of each head rotate (GPT-NeoX, Pythia: 0.25) |
| `logit_softcap` | C > 0 | logits bounded to C tanh(logits / C) |
| `dropout` | from 0 up to 1 | training only |

RoPE pairs channels 2i and 2i+1 of each head (interleaved, as RoFormer and Meta's Llama code);
Hugging Face's Llama, Qwen and GPT-NeoX pair channel i with i + d/2, which importing turns
into the zoo's pairing by permuting each head's query and key rows (as llama.cpp does).

### The families in these settings

One public checkpoint of each, read off its `config.json` on the Hugging Face Hub
(`https://huggingface.co/ORG/NAME/blob/main/config.json`); `vocab_size` and `context_length` are the card's
own fields.

| family (checkpoint) | settings |
|---|---|
| Llama-3.2 (`meta-llama/Llama-3.2-1B`) | n_layer 16, d_model 2048, n_head 32, n_kv_head 8, d_ff 8192, mlp swiglu, norm rmsnorm, norm_eps 1e-5, positions rope, rope_base 500000, rope_scaling {kind llama3, factor 32, low_freq_factor 1, high_freq_factor 4, original_context_length 8192}, tie_embeddings true, layer_bias false, bias false |
| SmolLM2 (`HuggingFaceTB/SmolLM2-135M`) | n_layer 30, d_model 576, n_head 9, n_kv_head 3, d_ff 1536, mlp swiglu, norm rmsnorm, norm_eps 1e-5, positions rope, rope_base 100000, tie_embeddings true, layer_bias false, bias false |
| Qwen2.5 (`Qwen/Qwen2.5-0.5B`) | n_layer 24, d_model 896, n_head 14, n_kv_head 2, d_ff 4864, mlp swiglu, norm rmsnorm, norm_eps 1e-6, positions rope, rope_base 1000000, layer_bias false, attention_bias qkv, tie_embeddings true, bias false (its `sliding_window` is off: `use_sliding_window` false) |
| Mistral (`mistralai/Mistral-7B-v0.1`) | n_layer 32, d_model 4096, n_head 32, n_kv_head 8, d_ff 14336, mlp swiglu, norm rmsnorm, norm_eps 1e-5, positions rope, rope_base 10000, sliding_window 4096, layer_bias false, tie_embeddings false, bias false |
| Pythia (`EleutherAI/pythia-160m`) | n_layer 12, d_model 768, n_head 12, d_ff 3072, mlp gelu, norm layernorm, norm_eps 1e-5, positions rope, rotary_fraction 0.25, rope_base 10000, residual parallel, layer_bias true, tie_embeddings false, bias false |
| GPT-2 (`openai-community/gpt2`) | n_layer 12, d_model 768, n_head 12, d_ff 3072, mlp gelu-tanh, norm layernorm, norm_eps 1e-5, positions learned, layer_bias true, tie_embeddings true, bias false |
"""


def card_schema() -> dict[str, Any]:
    """The JSON Schema a registry table is validated against (the name is the table's key)."""
    return ModelCard.model_json_schema()


def _type_name(info: FieldInfo) -> str:
    text = repr(info.annotation).replace("typing.", "")
    for model in (TokenizerSpec, Recipe, CheckpointRef, Metrics, AdapterSpec, Origin, ComponentSource):
        text = text.replace(f"<class 'zoo_core.catalogue.cards.{model.__name__}'>", "table")
        text = text.replace(f"zoo_core.catalogue.cards.{model.__name__}", "table")  # inside dict[...]
    text = text.replace("<class '", "").replace("'>", "").replace("NoneType", "None")
    return text.replace(" | ", " or ")  # a bare | would split the Markdown table's cell


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.get_default(call_default_factory=True)
        return "(table)" if isinstance(value, BaseModel) else f"`{json.dumps(value)}`"
    if info.default is PydanticUndefined:
        return "required"
    return f"`{json.dumps(info.default)}`"


def _defines_weights(info: FieldInfo) -> str:
    return "yes" if defines_weights(info) else "no"


def cards_markdown() -> str:
    """docs/cards.md: every field, its type, default, meaning and whether it defines the weights."""
    lines = [
        "# Card reference",
        "",
        "<!-- Generated by `zoo card-schema --markdown` from zoo_core/catalogue/cards.py; do not edit by hand. -->",
        "",
        "A variant's card is one table of a registry TOML file (its key is the variant's name),",
        "validated by the Pydantic models in `zoo_core/catalogue/cards.py` and written into the header of",
        "the variant's safetensors file. Unknown fields are errors. `zoo card-schema` prints the",
        "same rules as a JSON Schema, for editors and CI.",
        "",
        "*Defines the weights*: change such a field and the checkpoint no longer is what the",
        "card says (retrain); the other fields describe or measure and may be edited freely.",
        "`license` has no default: every card, a plugin's included, states one.",
        "",
    ]
    for title, model in SECTIONS:
        lines += [
            f"## {title}",
            "",
            (model.__doc__ or "").strip().splitlines()[0],
            "",
            "| field | type | default | defines the weights | meaning |",
            "|---|---|---|---|---|",
        ]
        for name, info in model.model_fields.items():
            meaning = (info.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | {_type_name(info)} | {_default(info)} | {_defines_weights(info)} | {meaning} |")
        lines.append("")
    return "\n".join(lines) + "\n" + TRANSFORMER_LAYOUTS
