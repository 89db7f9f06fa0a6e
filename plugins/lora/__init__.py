"""LoRA: low-rank adapters trained on a frozen base, and applied when their variant loads.

`zoo train NEW --from VARIANT --trainer lora` trains only the adapters (the
trainer ``lora``) and publishes NEW as an adapter variant: a small file of
adapter tensors whose card names the base and its checkpoint sha256. Loading NEW
applies them to the base's verified weights (the adapter ``lora``).
"""

from zoo_core import hookimpl


@hookimpl
def register_trainers(register):
    register("lora", "zoo_plugins.lora.trainer:LoRATrainer")


@hookimpl
def register_adapters(register):
    register("lora", "zoo_plugins.lora.adapter:LoRAAdapter")
