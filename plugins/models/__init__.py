"""The bigram model and the transformer language-model wrapper (seed 000)."""

from zoo_core import hookimpl


@hookimpl
def register_models(register):
    register("bigram", "zoo_plugins.models.bigram:build_bigram")
    register("transformer", "zoo_plugins.models.transformer:build_transformer")


@hookimpl
def register_families(register):
    # In the order an export without a recorded family asks them (docs/interop.md).
    register("gpt2", "zoo_plugins.models.families.gpt2:GPT2")
    register("llama", "zoo_plugins.models.families.llama:LLAMA")
    register("mistral", "zoo_plugins.models.families.llama:MISTRAL")
    register("qwen2", "zoo_plugins.models.families.llama:QWEN2")
    register("qwen3", "zoo_plugins.models.families.llama:QWEN3")
    register("gpt_neox", "zoo_plugins.models.families.gpt_neox:GPT_NEOX")
