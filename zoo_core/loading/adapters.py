"""Loading an adapter variant: its base's verified weights, then its own verified adapter.

An adapter variant's card has an ``adapter`` section (`zoo_core.catalogue.cards.AdapterSpec`):
the registered adapter that applies the file (``kind``), the base variant by
name, and the base's checkpoint sha256 it was trained on. Loading looks the base
up in the catalogue, refuses a base that is missing, is itself an adapter,
builds another network or has other weights than those recorded, loads and
verifies the base's weights exactly as loading the base would, then checks the
adapter's own file (sha256, tensor names and shapes the registered adapter
expects for that network, the card in its header) and hands the tensors to the
adapter, which changes the network in place: on the fly, or merged into the
base's weights. Nothing in either file is executed: both hold only tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from ..catalogue.cards import first_difference
from ..errors import ZooError, printable
from ..storage.checkpoints import Verification, load_verified, load_verified_tensors
from ..storage.initialisation import random_init_skipped

if TYPE_CHECKING:
    from ..catalogue.cards import ModelCard
    from ..catalogue.registry import Catalogue, Variant
    from ..plugin_api.manager import PluginSet


def load_adapted(
    variant: Variant,
    plugins: PluginSet,
    found: Catalogue,
    build_network: Callable[[Variant, PluginSet], Any],
    merge: bool = False,
    loaded_base: Any = None,
    progress: Any = None,
) -> tuple[Any, Verification]:
    """The base's network with ``variant``'s adapter applied (``merge``: folded into
    the weights), and what was verified: the adapter file's checks, then the base's.
    The base is looked up in the catalogue ``found`` and built by ``build_network``,
    both handed by the loader (api.py), which imports this module, not the reverse.

    ``loaded_base``: the base already loaded (a ZooModel, verified when it was
    loaded) in the process, as a server or `zoo compare` holds it. Applied on the
    fly, the adapter then wraps the base's very weight tensors instead of a second
    copy of them: an adapter costs its own few parameters, not another model."""
    card = variant.card
    spec = card.adapter
    assert spec is not None, "called for an adapter variant"
    base = adapter_base(variant, found)
    try:
        adapter = plugins.components["adapters"].create(spec.kind, spec.config)
    except ZooError as exc:
        raise ZooError(f"variant '{card.name}': {exc}") from None
    with random_init_skipped():  # the verified load below replaces every weight
        network = build_network(base, plugins)
    base_card = base.card
    if not merge and shares_weights_with(loaded_base, base):
        # The base's own tensors, not copies (assign): merging would write into them, so never then.
        network.load_state_dict(loaded_base.network.state_dict(), assign=True)
        verified_base = loaded_base.verification
        shared = "weights shared with the loaded base"
    else:
        verified_base = load_verified(
            base.checkpoint_path,
            base_card.checkpoint.sha256,
            network,
            base_card.parameters,
            card=base_card,
            progress=progress,
        )
        shared = None
    tensors, verification = load_verified_tensors(
        variant.checkpoint_path, card.checkpoint.sha256, adapter.tensor_shapes(network), card.parameters, card=card
    )
    adapter.apply(network, tensors, merge=merge)
    base_checks = verified_base.checks + (["card"] if verified_base.card_checked else []) + ([shared] if shared else [])
    verification.checks.append(f"base '{base.name}' ({', '.join(base_checks)})")
    verification.seconds += verified_base.seconds
    return network, verification


def shares_weights_with(loaded: Any, base: Variant) -> bool:
    """Whether ``loaded`` (a ZooModel, or None) holds exactly ``base``'s verified
    weights as loaded, unchanged: the same variant and checkpoint, float32 on the
    CPU (where every load starts), no adapter of its own and not quantized."""
    if loaded is None or loaded.name != base.name or loaded.card.adapter is not None:
        return False
    if loaded.card.checkpoint.sha256 != base.card.checkpoint.sha256:
        return False
    if any("quantized" in check for check in loaded.verification.checks):
        return False
    return all(p.device.type == "cpu" and p.dtype == torch.float32 for p in loaded.network.parameters())


def adapter_base(variant: Variant, found) -> Variant:
    """The base ``variant``'s adapter applies to, from the catalogue ``found``:
    refused in one line unless it is there, has weights of its own, builds the
    same network and is the checkpoint the adapter was trained on."""
    card = variant.card
    spec = card.adapter
    assert spec is not None, "called for an adapter variant"
    name, base_name = printable(card.name), printable(spec.base)
    base = found.find(spec.base)
    if base is None:
        raise ZooError(f"adapter '{name}' needs base '{base_name}', which is not in the catalogue")
    if base.card.adapter is not None:
        raise ZooError(f"adapter '{name}': its base '{base_name}' is an adapter itself, not weights of its own")
    difference = first_difference(_network_of(card), _network_of(base.card))
    if difference:
        field, here, there = difference
        raise ZooError(
            f"adapter '{name}' was made for another network than base '{base_name}' builds "
            f"({printable(field)}: {here!r} here, {there!r} in the base's card)"
        )
    recorded = base.card.checkpoint.sha256
    if recorded != spec.base_sha256:
        shown = f"{recorded[:16]}…" if recorded else "(none: not trained)"
        raise ZooError(
            f"adapter '{name}': base '{base_name}' checkpoint sha256 {shown} is not the "
            f"{spec.base_sha256[:16]}… the adapter was trained on"
        )
    return base


def _network_of(card: ModelCard) -> dict[str, Any]:
    """What decides the network and the meaning of its token ids."""
    return {
        "architecture": card.architecture,
        "config": card.config,
        "context_length": card.context_length,
        "tokenizer": {"kind": card.tokenizer.kind, "vocab_size": card.tokenizer.vocab_size},
    }
