"""The transformer's configuration: one typed model of a card's `config` table, model-wide and per layer.

This module imports pydantic only, never torch: cards are validated on paths that must stay
free of torch (`zoo list`, `zoo show`). `TransformerConfig.layer_specs()` expands the card's
`layers` pattern into one frozen `LayerSpec` per layer, which the network builds its blocks from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from zoo_core.errors import ZooError

# What docs/cards.md says after the settings' tables (zoo card-schema --markdown).
REFERENCE_NOTES = """RoPE pairs channels 2i and 2i+1 of each head (interleaved, as RoFormer and Meta's Llama code);
Hugging Face's Llama, Qwen and GPT-NeoX pair channel i with i + d/2, which importing turns
into the zoo's pairing by permuting each head's query and key rows (as llama.cpp does).

A layer's settings are resolved in order: its group's key, else the model-wide key, else the
default. Layers whose rotary settings are equal share one position encoding. Five
sliding-window layers with one RoPE base, then one global layer with another (Gemma 3's pattern),
repeated until `n_layer`:

```toml
[my-variant.config]
n_layer = 12
positions = "rope"
norm = "rmsnorm-unit-offset"
norm_placement = "both"
query_scale = 0.0625
layers = [{repeat = 5, sliding_window = 512, rope_base = 10000.0}, {rope_base = 1000000.0}]
```

Layers 0-4 and 6-10 see 512 tokens and rotate with base 10000; layers 5 and 11 see the whole
window and rotate with base 1000000. A key a layer may not set (`d_model` in a group) or an
unknown one is refused in one line naming it.

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
| OLMo 2 (`allenai/OLMo-2-0425-1B`) | n_layer 16, d_model 2048, n_head 16, n_kv_head 16, d_ff 8192, mlp swiglu, norm rmsnorm, norm_eps 1e-6, norm_placement after, qk_norm rmsnorm-whole, positions rope, rope_base 500000, layer_bias false, attention_bias none, tie_embeddings false, bias false |
| Granite 3.0 (`ibm-granite/granite-3.0-2b-base`) | n_layer 40, d_model 2048, n_head 32, n_kv_head 8, d_ff 8192, mlp swiglu, norm rmsnorm, norm_eps 1e-5, positions rope, rope_base 10000, embedding_scale 12, query_scale 0.015625, residual_scale 0.22, logit_scale 0.125 (its `logits_scaling` 8), layer_bias false, tie_embeddings true, bias false |
| SmolLM3 (`HuggingFaceTB/SmolLM3-3B`) | n_layer 36, d_model 2048, n_head 16, n_kv_head 4, d_ff 11008, mlp swiglu, norm rmsnorm, norm_eps 1e-6, positions rope, rope_base 5000000, layers [{repeat 3}, {rope false}] (its `no_rope_layer_interval` 4), layer_bias false, tie_embeddings true, bias false |
| Mixtral (`mistralai/Mixtral-8x7B-v0.1`) | n_layer 32, d_model 4096, n_head 32, n_kv_head 8, d_ff 14336, experts 8, experts_per_token 2, mlp swiglu, norm rmsnorm, norm_eps 1e-5, positions rope, rope_base 1000000, layer_bias false, tie_embeddings false, bias false (its `sliding_window` is null) |
| Qwen1.5-MoE (`Qwen/Qwen1.5-MoE-A2.7B`) | n_layer 24, d_model 2048, n_head 16, n_kv_head 16, d_ff 5632, experts 60, experts_per_token 4, expert_d_ff 1408, shared_expert_d_ff 5632, norm_topk_prob false, mlp swiglu, norm rmsnorm, norm_eps 1e-6, positions rope, rope_base 1000000, attention_bias qkv, layer_bias false, tie_embeddings false, bias false (`decoder_sparse_step` 1 and no `mlp_only_layers`: every layer has experts) |
| Phi-3 (`microsoft/Phi-3-mini-4k-instruct`) | n_layer 32, d_model 3072, n_head 32, n_kv_head 32, d_ff 8192, mlp swiglu, norm rmsnorm, norm_eps 1e-5, positions rope, rope_base 10000, sliding_window 2047, layer_bias false, attention_bias none, tie_embeddings false, bias false |
| Phi-2 (`microsoft/phi-2`) | n_layer 32, d_model 2560, n_head 32, d_ff 10240, mlp gelu-tanh, norm layernorm, norm_eps 1e-5, positions rope, rotary_fraction 0.4, rope_base 10000, residual parallel-shared-norm, layer_bias true, attention_bias all, tie_embeddings false, bias true |
| StableLM 2 (`stabilityai/stablelm-2-1_6b`) | n_layer 24, d_model 2048, n_head 32, n_kv_head 32, d_ff 5632, mlp swiglu, norm layernorm, norm_eps 1e-5, positions rope, rotary_fraction 0.25, rope_base 10000, layer_bias false, layernorm_bias true, attention_bias qkv, tie_embeddings false, bias false |
| StarCoder2 (`bigcode/starcoder2-3b`) | n_layer 30, d_model 3072, n_head 24, n_kv_head 2, d_ff 12288, mlp gelu-tanh, norm layernorm, norm_eps 1e-5, positions rope, rope_base 999999.4420358813, sliding_window 4096, layer_bias true, attention_bias all, tie_embeddings true, bias false |
| Command-R (`CohereForAI/c4ai-command-r-v01`) | n_layer 40, d_model 8192, n_head 64, n_kv_head 64, d_ff 22528, mlp swiglu, norm layernorm, layernorm_bias false, norm_eps 1e-5, positions rope, rope_base 8000000, residual parallel-shared-norm, logit_scale 0.0625, layer_bias false, attention_bias none, tie_embeddings true, bias false |
| Falcon (`tiiuae/falcon-7b`) | n_layer 32, d_model 4544, n_head 71, n_kv_head 1 (`multi_query`), d_ff 18176, mlp gelu, norm layernorm, norm_eps 1e-5, positions rope, rope_base 10000, residual parallel-shared-norm, layer_bias false, layernorm_bias true, attention_bias none, tie_embeddings true, bias false |
"""


class SettingError(ValueError):
    """A setting that cannot be built; ``field`` names its key (the card's error line names it)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _whole(value: Any) -> Any:
    # The card's own words, not pydantic's: 32.0 is not a width, True is not a count.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"must be a whole number, not {value!r}")
    if value < 1:
        raise ValueError(f"must be at least 1, not {value}")
    return value


def _fraction(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"must be a number from 0 up to (not including) 1, not {value!r}")
    return value


def _positive(name: str):
    def check(value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"{name} must be a positive number, not {value!r}")
        return value

    return BeforeValidator(check)


def _window(value: Any) -> Any:
    return value if value is False or value is None else _whole(value)


Whole = Annotated[int, BeforeValidator(_whole)]
Window = Annotated[int | Literal[False] | None, BeforeValidator(_window)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LayerSettings(_Strict):
    """The settings a layer may have of its own (unset: the model-wide value, else what the zoo always built)."""

    sliding_window: Window = Field(
        None,
        description="W: each query sees itself and the W - 1 keys before it (key j is seen from query i when "
        "i - W < j <= i, as transformers' Mistral masks: `sliding_window_overlay`, kv_idx > q_idx - W); "
        "unset or false: global attention",
    )
    rope_base: Annotated[float | None, _positive("rope_base")] = Field(
        None, description='RoPE\'s theta (default 10000); only with `positions = "rope"`'
    )
    rope_scaling: dict[str, Any] | None = Field(
        None,
        description='`{kind = "linear", factor = F}` or `{kind = "llama3", factor, low_freq_factor, '
        "high_freq_factor, original_context_length}`: stretched frequencies (Llama 3.1 / 3.2 use `llama3`)",
    )
    rotary_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="in (0, 1], default 1: only the first round(fraction `head_size`) channels of each head "
        "rotate (GPT-NeoX, Pythia: 0.25)",
    )
    norm: str | None = Field(
        None,
        description="`layernorm` (default), `rmsnorm`, or `rmsnorm-unit-offset` (Gemma's RMSNorm: its stored "
        "weight w scales by 1 + w, starting at 0); the model-wide value is the final norm's too",
    )
    norm_eps: Annotated[float | None, _positive("norm_eps")] = Field(
        None, description="every norm's epsilon (default torch's: 1e-5 for LayerNorm)"
    )
    norm_placement: Literal["before", "after", "both"] | None = Field(
        None,
        description="pre-norm blocks: `before` (default): x + f(norm(x)); `after`: x + norm(f(x)), the norm on "
        "each sublayer's output (OLMo 2; no `norm1`, `norm2`); `both`: x + norm_out(f(norm_in(x))) (Gemma 2 and 3). "
        "The output norms are `post_attention_norm` and `post_feed_forward_norm`",
    )
    residual: str | None = Field(
        None,
        description="`sequential` (default), `parallel`: x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX), "
        "`parallel-shared-norm`: one norm feeds both, no `norm2` (GPT-J, Falcon). Pre-norm blocks only",
    )
    mlp: str | None = Field(
        None,
        description="the feed-forward: `relu` (default), `gelu` (exact), `gelu-tanh`, `relu2` (ReLU squared), "
        "`swiglu`, `geglu`, `geglu-tanh`. Gated kinds: `feed_forward.up` is one Linear(`d_model`, 2 `d_ff`) whose first `d_ff` "
        "outputs are the gate and the next `d_ff` the up projection; hidden = act(gate) * up, act SiLU (`swiglu`) "
        "or exact GELU (`geglu`) or its tanh approximation (`geglu-tanh`, Gemma). Older cards' `activation` reads as `mlp`",
    )
    qk_norm: (
        bool | Literal["rmsnorm", "rmsnorm-unit-offset", "rmsnorm-whole", "layernorm", "layernorm-per-head"] | None
    ) = Field(
        None,
        description="false (default); true: each head's queries and keys RMS-normalised without a scale (the "
        "speedrun); `rmsnorm`: with a learned scale per head channel, `attention.q_norm` and `attention.k_norm`, "
        "epsilon `norm_eps` (Qwen3); `rmsnorm-unit-offset`: that scale stored as w, scaling by 1 + w (Gemma 3); "
        "`rmsnorm-whole`: all the queries (and all the keys) of a token normalised "
        "together, over the whole projected width, a learned scale per channel (OLMo 2); `layernorm`: a LayerNorm "
        "over each head's channels with a weight and bias all heads share (Phi's `qk_layernorm`); "
        "`layernorm-per-head`: a LayerNorm whose weight, no bias, is each head's own, `q_norm.weight` (`n_head`, "
        "`head_size`) (StableLM's `qk_layernorm`, Cohere's `use_qk_norm`)",
    )
    layer_bias: bool | None = Field(
        None,
        description="unset: seed 000's mix (attention without biases, feed-forward and LayerNorm with); true or "
        "false: biases in every block linear and norm (and the final norm) or in none",
    )
    attention_bias: Literal["all", "qkv", "none"] | None = Field(
        None,
        description="`all`, `qkv` (the query/key/value projection only, Qwen2), `none`; default follows `layer_bias`",
    )
    layernorm_bias: bool | None = Field(
        None,
        description="the LayerNorms' biases (the blocks' and the final norm's) on their own: true with "
        "`layer_bias` false is StableLM's and Falcon's (biased norms, unbiased linears), false with `layer_bias` "
        "true a biased network with weight-only norms; default follows `layer_bias`",
    )
    attention_softcap: Annotated[float | None, _positive("attention_softcap")] = Field(
        None,
        description="C: the attention scores become C tanh(scores / C) before the mask and the softmax (Gemma 2)",
    )
    query_scale: Annotated[float | None, _positive("query_scale")] = Field(
        None,
        description="what the scores q.k are multiplied by instead of `head_size`^-0.5 (Gemma: "
        "query_pre_attn_scalar^-0.5)",
    )
    rope: bool | None = Field(
        None,
        description="true (default); false: the layer's queries and keys are not rotated, its attention sees no "
        'positions (SmolLM3\'s `no_rope_layers`); only with `positions = "rope"`',
    )
    experts: Annotated[int | Literal[False] | None, BeforeValidator(_window)] = Field(
        None,
        description="E: the feed-forward is a mixture of E experts (`feed_forward.router`, `experts_up.weight` (E, 2 "
        "`expert_d_ff`, `d_model`) for a gated kind, `experts_down.weight` (E, `d_model`, `expert_d_ff`)), each token "
        "sent to `experts_per_token` of them (Mixtral, Qwen2-MoE); unset or false: one dense feed-forward "
        "(Qwen2-MoE's `mlp_only_layers`)",
    )


class LayerGroup(LayerSettings):
    """Layer groups

    `layers = [{...}, ...]` is a pattern of groups of layers, cycled until there are `n_layer`
    layers; a group's keys override the model-wide settings for its layers.
    """

    repeat: Whole = Field(1, description="how many layers in a row the group covers")

    @model_validator(mode="before")
    @classmethod
    def _only_layer_settings(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key in TransformerConfig.model_fields and key not in cls.model_fields:
                    raise SettingError(key, f"{key} is model-wide: a layer group cannot set it")
        return data


@dataclass(frozen=True)
class RotarySpec:
    """A layer's rotary settings as set (None: the encoding's own default)."""

    base: float | None = None
    scaling: dict[str, Any] | None = None
    fraction: float | None = None
    rotates: bool = True  # False: the layer's `rope = false`, no rotation at all

    def encoding_settings(self) -> dict[str, Any]:
        """The card's names of the settings that are set, as the encoding is handed them."""
        named = {"rope_base": self.base, "rope_scaling": self.scaling, "rotary_fraction": self.fraction}
        return {name: value for name, value in named.items() if value is not None}


@dataclass(frozen=True)
class LayerSpec:
    """One layer, resolved: its group's settings over the model-wide ones over the zoo's defaults."""

    sliding_window: int | None  # None: global attention
    rotary: RotarySpec | None  # None: no rotary setting, the position encoding's own defaults
    norm: str
    norm_eps: float | None
    norm_placement: str
    residual: str
    mlp: str
    qk_norm: bool | str
    layer_bias: bool | None
    attention_bias: str | None
    attention_softcap: float | None
    query_scale: float | None
    experts: int | None  # None: a dense feed-forward
    layernorm_bias: bool | None

    # Biases per projection, as the built-in block resolves layer_bias and attention_bias.
    @property
    def qkv_bias(self) -> bool:
        return self._attention_bias != "none"

    @property
    def proj_bias(self) -> bool:
        return self._attention_bias == "all"

    @property
    def feed_forward_bias(self) -> bool:
        return self.layer_bias is not False

    @property
    def norm_bias(self) -> bool:
        return self.layernorm_bias if self.layernorm_bias is not None else self.layer_bias is not False

    @property
    def _attention_bias(self) -> str:
        if self.attention_bias is not None:
            return self.attention_bias
        return "all" if self.layer_bias else "none"


# What a block has always been built with where a card says nothing: a setting
# equal to its default is not handed to the block factory, so a block written
# before the setting existed keeps working.
LAYER_DEFAULTS: dict[str, Any] = {
    "sliding_window": None,
    "norm": "layernorm",
    "norm_eps": None,
    "norm_placement": "before",
    "residual": "sequential",
    "mlp": "relu",
    "qk_norm": False,
    "layer_bias": None,
    "attention_bias": None,
    "attention_softcap": None,
    "query_scale": None,
    "experts": None,
    "layernorm_bias": None,
}


class _ModelWide(_Strict):
    """The settings every layer shares (a base class, so that they come first in the reference)."""

    # The card's own context_length and tokenizer.vocab_size, which the zoo adds to the table.
    vocab_size: Whole | None = Field(None, description="set by the zoo from the card's `tokenizer.vocab_size`")
    context_length: Whole | None = Field(None, description="set by the zoo from the card's `context_length`")
    d_model: Whole = Field(description="the width of the residual stream (required)")
    n_layer: Whole = Field(description="the number of blocks (required)")
    n_head: Whole = Field(description="query heads (required)")
    n_kv_head: Whole | None = Field(
        None,
        description="divides `n_head`; default `n_head`: key/value heads, fewer is grouped-query attention, 1 "
        "multi-query. `attention.qkv` stays one Linear whose output rows are the query heads, then the key heads, "
        "then the value heads",
    )
    head_size: Whole | None = Field(
        None,
        description="channels per head, default `d_model / n_head`; `attention.proj` is Linear(`n_head` "
        "`head_size`, `d_model`) (Qwen3)",
    )
    d_ff: Whole | None = Field(None, description="the feed-forward's hidden width (default 4 `d_model`)")
    positions: str = Field(
        "learned", description="`learned` (default), `sinusoidal`, `none`, `rope`, or a plugin's: where a token is"
    )
    block: str = Field("pre-norm", description="`pre-norm` (default), `post-norm`, or a plugin's: where the norms sit")
    dropout: Annotated[float, BeforeValidator(_fraction)] = Field(
        0.0, description="from 0 up to 1, training only (architecture `gpt`: default 0.2)"
    )
    bias: bool = Field(True, description="the vocabulary head's bias")
    tie_embeddings: bool = Field(False, description="the head reuses the token embedding")
    embedding_scale: float | None = Field(
        None, description="token embeddings are multiplied by it (Gemma: sqrt(`d_model`))"
    )
    logit_scale: Annotated[float | None, _positive("logit_scale")] = Field(
        None,
        description="s > 0: the vocabulary head's output multiplied by it, before any soft-cap (Cohere's "
        "`logit_scale`; Granite's `logits_scaling` L as 1 / L)",
    )
    logit_softcap: Annotated[float | None, _positive("logit_softcap")] = Field(
        None, description="C > 0: logits bounded to C tanh(logits / C)"
    )
    residual_scale: Annotated[float | None, _positive("residual_scale")] = Field(
        None,
        description="s > 0: each sublayer's output multiplied by it before the residual add, x + s f(x) "
        "(Granite's `residual_multiplier`)",
    )
    experts_per_token: Whole | None = Field(
        None,
        description="k (required with `experts`): each token goes to the k experts of highest router "
        "probability (softmax over all experts' logits), its output their outputs weighted by those probabilities",
    )
    expert_d_ff: Whole | None = Field(None, description="each expert's hidden width (default `d_ff`)")
    norm_topk_prob: bool | None = Field(
        None,
        description="true (default, Mixtral): the k chosen probabilities are rescaled to sum to 1; false: used "
        "as they are (Qwen2-MoE's `norm_topk_prob` false)",
    )
    shared_expert_d_ff: Whole | None = Field(
        None,
        description="W: beside the experts, a shared feed-forward of hidden width W that every token takes, "
        "its output multiplied by sigmoid(x . g) (`feed_forward.shared`, `feed_forward.shared_gate`: "
        "Qwen2-MoE's shared expert)",
    )


class TransformerConfig(LayerSettings, _ModelWide):
    """Transformer layouts

    Every setting is optional but the three sizes; left out, it is what the zoo always built. A
    setting reaches the block or the position encoding only when set, and one that the registered
    block or encoding does not take by name is refused in one line (a block that swallows unknown
    keywords with `**kwargs` takes none); an unknown key is refused when the card is read, at every
    level, in one line naming it. Settings marked *per layer* may also be set for some layers only,
    in `layers`.
    """

    layers: list[LayerGroup] | None = Field(
        None,
        description='per-layer settings, a pattern of groups cycled until `n_layer` layers (see "Layer groups")',
    )

    # Keys cards once used, old -> current: read under the current name, never written again.
    renamed_settings: ClassVar[dict[str, str]] = {"activation": "mlp"}

    @model_validator(mode="after")
    def _possible_shape(self) -> TransformerConfig:
        # With its own head_size, a head need not be a slice of the width (Qwen3).
        if self.head_size is None and self.d_model % self.n_head:
            raise SettingError("n_head", f"the width d_model = {self.d_model} is not divisible by {self.n_head} heads")
        if self.n_kv_head is not None and self.n_head % self.n_kv_head:
            raise SettingError(
                "n_kv_head", f"{self.n_head} query heads do not share {self.n_kv_head} key/value heads evenly"
            )
        if self.positions != "rope" and any(g.rope is not None for g in [self, *(self.layers or [])]):
            raise SettingError("rope", f"rope switches RoPE on or off in a layer; positions is '{self.positions}'")
        self._possible_experts()
        return self

    def _possible_experts(self) -> None:
        # From the groups, never the expanded layers: a card may claim 10**9 layers, refused later by size.
        groups = self.layers or []
        values = {self.experts if g.experts is None else g.experts for g in groups} if groups else {self.experts}
        counts = {value for value in values if value}
        if not counts:
            for name in ("experts_per_token", "expert_d_ff", "norm_topk_prob", "shared_expert_d_ff"):
                if getattr(self, name) is not None:
                    raise SettingError(name, f"{name} is a setting of experts, and no layer sets experts")
            return
        if self.experts_per_token is None:
            raise SettingError("experts_per_token", "experts need experts_per_token, how many each token goes to")
        if self.experts_per_token > min(counts):
            raise SettingError(
                "experts_per_token", f"{self.experts_per_token} experts per token, but a layer has {min(counts)}"
            )
        if self.layer_bias:
            raise SettingError("layer_bias", "experts have no biases; set layer_bias false or leave it unset")

    def layer_specs(self) -> list[LayerSpec]:
        """Each layer's settings: the `layers` groups (each ``repeat`` times) cycled until ``n_layer``."""
        pattern: list[LayerGroup | None] = [group for group in self.layers or [] for _ in range(group.repeat)]
        pattern = pattern or [None]
        return [self._resolve(pattern[i % len(pattern)]) for i in range(self.n_layer)]

    def _resolve(self, group: LayerGroup | None) -> LayerSpec:
        def setting(name: str) -> Any:
            for source in (group, self):
                value = None if source is None else getattr(source, name)
                if value is not None:
                    return value
            return LAYER_DEFAULTS.get(name)

        window = setting("sliding_window")
        rotary = RotarySpec(
            setting("rope_base"), setting("rope_scaling"), setting("rotary_fraction"), setting("rope") is not False
        )
        return LayerSpec(
            sliding_window=None if window is False else window,
            experts=setting("experts") or None,
            rotary=rotary if rotary != RotarySpec() else None,
            **{name: setting(name) for name in LAYER_DEFAULTS if name not in ("sliding_window", "experts")},
        )

    @classmethod
    def read(
        cls, config: dict[str, Any], architecture: str, defaults: dict[str, Any] | None = None
    ) -> TransformerConfig:
        """``config`` (an architecture config) validated, or a one-line ZooError naming the key."""
        try:
            return cls.model_validate({**(defaults or {}), **config})
        except ValidationError as exc:
            raise ZooError(_one_line(exc, architecture)) from None

    @classmethod
    def estimate_sizes(cls, config: dict[str, Any], tokens: int | None = None) -> tuple[int, int] | None:
        """(parameters, activation values of one window) from a config's sizes: an upper bound for the
        zoo's transformer, for the budget check (zoo_core.catalogue.limits); None when it has no width.
        ``tokens``: the positions one forward pass reads at once (default the whole context), each
        attending to a full context of cached keys."""
        C = config.get("d_model")
        if not isinstance(C, int) or isinstance(C, bool):
            return None
        V = int(config.get("vocab_size", 1))
        T = int(config.get("context_length", 1))
        L = int(config.get("n_layer", 0))
        H = int(config.get("n_head", 1))
        F = int(config.get("d_ff") or 4 * C)
        heads = H * int(config.get("head_size") or C // H)  # the queries' width, and the output's input
        keys = int(config.get("n_kv_head") or H) * (heads // H)
        groups = [config, *(g for g in config.get("layers") or [] if isinstance(g, dict))]
        gated = any(g.get("mlp", g.get("activation")) in ("swiglu", "geglu", "geglu-tanh") for g in groups)
        up = 2 * F if gated else F  # a gated up projection is two
        norms = 9 * C + (4 * C if any(g.get("norm_placement") in ("after", "both") for g in groups) else 0)
        # q, k, v, out; up, down; biases and norms
        per_layer = C * (2 * heads + 2 * keys) + C * (up + F) + up + norms
        # Experts: E feed-forwards of expert_d_ff and a router (C, E) replace the dense one, beside
        # any shared expert and its gate; counted in every layer, an upper bound where some are dense.
        E = max([int(g.get("experts") or 0) for g in groups if not isinstance(g.get("experts"), bool)] or [0])
        routed = 0  # hidden values per token beyond a dense layer's
        if E:
            expert = int(config.get("expert_d_ff") or F)
            shared = int(config.get("shared_expert_d_ff") or 0)
            widths = (2 if gated else 1) + 1
            per_layer += max(0, E * C * widths * expert + C * E + widths * C * shared + C - C * (up + F))
            routed = int(config.get("experts_per_token") or 1) * expert + shared + E
        # A table of T vectors: trained for learned positions, a buffer (RoPE's angles) or nothing otherwise.
        learned = config.get("positions", "learned") not in ("none", "sinusoidal", "rope", "alibi")
        parameters = 2 * V * C + V + L * per_layer + 2 * C + (T * C if learned else 0)  # embedding, head, blocks, norm
        # Per layer, scores, logits, KV cache, positions.
        W = min(T, tokens or T)
        activations = L * W * (4 * C + F + routed) + H * W * T + W * V + 2 * L * T * C + T * C
        return parameters, activations

    reference_notes: ClassVar[str] = REFERENCE_NOTES  # docs/cards.md, after the tables


def _one_line(error: ValidationError, architecture: str) -> str:
    """What building refuses, as building always said it: unknown and missing keys listed, else the first problem."""
    problems = error.errors()
    unknown = [_path(p["loc"]) for p in problems if p["type"] == "extra_forbidden"]
    if unknown:
        return f"architecture '{architecture}': unknown config key(s) {', '.join(sorted(unknown))}"
    missing = [_path(p["loc"]) for p in problems if p["type"] == "missing"]
    if missing:
        return f"architecture '{architecture}': config is missing {', '.join(sorted(missing))}"
    first = problems[0]
    raised = (first.get("ctx") or {}).get("error")
    path = [*first["loc"], *([raised.field] if isinstance(raised, SettingError) else [])]
    message = str(raised) if isinstance(raised, ValueError) else first["msg"]
    return f"architecture '{architecture}': config.{_path(path)}: {message}"


def _path(loc: Any) -> str:
    return ".".join(str(part) for part in loc)
