"""The bigram model and the transformer language-model wrapper (seed 000)."""

from zoo_core import hookimpl


def _norm_label(config: dict) -> str | None:
    """`zoo list`'s norm column: where the block puts its norms and which kind (``pre-LN``)."""
    block = config.get("block", "pre-norm")  # TransformerConfig's default: an imported card names none
    if not block:
        return None
    norm = config.get("norm", "layernorm")
    placement = "pre" if "pre-norm" in block else "post" if "post-norm" in block else block
    return f"{placement}-{ {'layernorm': 'LN', 'rmsnorm': 'RMS'}.get(norm, norm) }"


# What `zoo list` shows of a transformer card (register_models' listed=): plain Python,
# read without importing the architecture.
TRANSFORMER_LISTED = {"layers": "n_layer", "positions": "positions", "norm": _norm_label}


@hookimpl
def register_models(register):
    register("bigram", "zoo_plugins.models.bigram:build_bigram")
    register(
        "transformer",
        "zoo_plugins.models.transformer:build_transformer",
        config="zoo_plugins.models.settings:TransformerConfig",
        listed=TRANSFORMER_LISTED,
        # The testing kit checks third-party encodings and blocks inside a tiny transformer.
        hosts={"positions": "positions", "blocks": "block"},
        tiny={"n_layer": 2},
    )


@hookimpl
def register_families(register):
    # In the order an export without a recorded family asks them (docs/interop.md).
    register("gpt2", "zoo_plugins.models.families.gpt2:GPT2")
    register("llama", "zoo_plugins.models.families.llama:LLAMA")
    register("mistral", "zoo_plugins.models.families.llama:MISTRAL")
    register("qwen2", "zoo_plugins.models.families.llama:QWEN2")
    register("qwen3", "zoo_plugins.models.families.llama:QWEN3")
    register("gpt_neox", "zoo_plugins.models.families.gpt_neox:GPT_NEOX")
    register("olmo2", "zoo_plugins.models.families.olmo2:OLMO2")
    register("granite", "zoo_plugins.models.families.granite:GRANITE")
    register("smollm3", "zoo_plugins.models.families.smollm3:SMOLLM3")
    register("mixtral", "zoo_plugins.models.families.moe:MIXTRAL")
    register("qwen2_moe", "zoo_plugins.models.families.moe:QWEN2_MOE")
    register("phi3", "zoo_plugins.models.families.phi3:PHI3")
    register("phi", "zoo_plugins.models.families.phi:PHI")
    register("stablelm", "zoo_plugins.models.families.stablelm:STABLELM")
    register("starcoder2", "zoo_plugins.models.families.starcoder2:STARCODER2")
    register("cohere", "zoo_plugins.models.families.cohere:COHERE")
    register("falcon", "zoo_plugins.models.families.falcon:FALCON")
    register("gemma", "zoo_plugins.models.families.gemma:GEMMA")
    register("gemma2", "zoo_plugins.models.families.gemma:GEMMA2")
    register("gemma3", "zoo_plugins.models.families.gemma:GEMMA3")
