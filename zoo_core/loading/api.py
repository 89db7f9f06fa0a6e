"""The Python API: the same reach as the CLI.

>>> import zoo_core
>>> [card.name for card in zoo_core.list_variants("transformer-*")]
>>> model = zoo_core.load("transformer-6b-sin")
>>> model.generate("ROMEO:", max_new_tokens=50, seed=1)
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..catalogue.limits import CannotMeasure, check_budget
from ..catalogue.suggestions import train_command
from ..devices import place, resolve_device, resolve_dtype
from ..errors import ZooError
from ..inference.model import ZooModel
from ..plugin_api.manager import PluginSet, get_plugins
from ..storage import checkpoints
from ..storage.files import describe_os_error
from ..storage.initialisation import random_init_skipped
from .adapters import load_adapted
from .lookup import (  # the front's part, here too: the API's one address
    BUILDING_ROLES,
    Variant,
    catalogue,
    get_variant,
    list_variants,
    require_components,
    unbuildable_reason,
)
from .quantizing import check_quantize
from .sizing import build_on_meta, counted

__all__ = [
    "BUILDING_ROLES",
    "build_network",
    "catalogue",
    "check_tokenizer_file",
    "check_variant_budget",
    "get_variant",
    "has_published_weights",
    "list_variants",
    "load",
    "load_many",
    "load_tokenizer",
    "load_variant",
    "require_components",
    "unbuildable_reason",
    "verify_variant_files",
]


def load_tokenizer(variant: Variant, plugins: PluginSet | None = None):
    plugins = plugins or get_plugins()
    spec = variant.card.tokenizer  # what a tokenizer factory reads: kind, vocab_size, file, sha256 (see hookspecs)
    path = variant.tokenizer_path
    if spec.sha256 is not None and path is not None:
        check_tokenizer_file(path, spec.sha256)
    return plugins.components["tokenizers"].create(spec.kind, spec, path)


MAX_TOKENIZER_BYTES = 256 * 1024 * 1024


def check_tokenizer_file(path: Path, expected: str) -> None:
    """A tokenizer file must be the one the card names: a vocabulary of the same
    size with two tokens swapped loads fine and silently changes every sample."""
    try:
        size = os.stat(path).st_size
        if size > MAX_TOKENIZER_BYTES:  # hashing a hostile 1 TB file would take hours
            raise ZooError(
                f"{path}: tokenizer file is {size:,} bytes, more than the {MAX_TOKENIZER_BYTES:,} a tokenizer can need"
            )
        actual = checkpoints.sha256_file(path, "tokenizer file")
    except FileNotFoundError:
        raise ZooError(f"{path}: tokenizer file not found") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read tokenizer file: {describe_os_error(exc)}") from None
    if actual != expected:
        raise ZooError(
            f"{path}: sha256 mismatch: the card has {expected[:16]}…, the tokenizer file has {actual[:16]}… (changed or replaced)"
        )


def check_variant_budget(variant: Variant, plugins: PluginSet | None = None):
    """Refuse, before anything is allocated, a card whose network would be too
    big to build or run (see zoo_core.catalogue.limits); returns the estimate."""
    return _checked_budget(variant, plugins or get_plugins())[0]


def _checked_budget(variant: Variant, plugins: PluginSet):
    """``check_variant_budget``'s estimate, and the network it built on the meta
    device to count it (None when it counted nothing: the architecture estimates
    itself, or the card was refused or estimated without building), so that a
    caller who needs that network does not build it again."""
    card = variant.card
    factory = plugins.components["models"].factory(card.architecture)
    config = card.architecture_config()
    built = []

    def measure() -> tuple[int, int]:  # the exact count: the architecture built on the meta device
        network = build_on_meta(
            lambda: plugins.components["models"].create(card.architecture, dict(config), plugins.components)
        )
        built.append(network)
        return counted(network)

    estimate = check_budget(card.name, config, getattr(factory, "estimate_parameters", None), measure)
    return estimate, (built[0] if built else None)


def build_network(variant: Variant, plugins: PluginSet | None = None):
    """A freshly initialised network for the card (weights not loaded)."""
    plugins = plugins or get_plugins()
    check_variant_budget(variant, plugins)
    return _build_checked(variant, plugins)


def _build_checked(variant: Variant, plugins: PluginSet):
    """``build_network`` for a caller that has just checked the card's budget: a
    load builds the network once on the meta device, to count it, and once for real."""
    card = variant.card
    try:
        return plugins.components["models"].create(card.architecture, card.architecture_config(), plugins.components)
    except ZooError:
        raise
    except (TypeError, ValueError) as exc:
        raise ZooError(f"variant '{card.name}': cannot build architecture '{card.architecture}': {exc}") from exc


def load(
    name: str,
    plugins: PluginSet | None = None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    merge_adapter: bool = False,
    quantize: str | None = None,
    base=None,
):
    """Build the variant's network and load its verified weights, then move it to
    ``device`` (default: the CPU; "auto" picks a GPU if there is one) and cast it
    to ``dtype`` ("float32", "bfloat16" or "float16"), or with ``quantize="int8"``
    turn its linear layers into int8 ones (the CPU only; zoo_core.loading.quantizing).

    An adapter variant (a card with an ``adapter`` section, e.g. from
    `zoo train NEW --from BASE --trainer lora`) loads its base's verified weights
    and applies the adapter: on the fly, or with ``merge_adapter=True`` folded
    into the base's weights (the plain base network, same logits). ``base``: that
    base, already loaded in this process (``load(BASE)``): applied on the fly on
    the CPU in float32, the adapter shares its weight tensors instead of loading
    them a second time."""
    plugins = plugins or get_plugins()
    return load_variant(
        catalogue(plugins).get(name),
        plugins,
        device=device,
        dtype=dtype,
        merge_adapter=merge_adapter,
        quantize=quantize,
        base=base,
    )


def load_many(names: list[str], plugins: PluginSet | None = None, **options) -> list:
    """``load`` of each name (``options`` as ``load`` takes them), bases before the
    adapters applied to them: an adapter whose base is among ``names`` shares the
    base's weights rather than loading them a second time (``load(..., base=)``)."""
    plugins = plugins or get_plugins()
    found = catalogue(plugins)
    variants = [found.get(name) for name in names]
    loaded: dict[int, ZooModel] = {}
    for index in sorted(range(len(names)), key=lambda i: variants[i].card.adapter is not None):
        adapter = variants[index].card.adapter
        base = next((m for m in loaded.values() if adapter is not None and m.name == adapter.base), None)
        loaded[index] = load_variant(variants[index], plugins, base=base, **options)
    return [loaded[index] for index in range(len(names))]


def has_published_weights(variant: Variant) -> bool:
    """False for a variant declared before it was trained: no checksum, no file."""
    return variant.card.checkpoint.sha256 is not None or variant.checkpoint_path.exists()


def load_variant(
    variant: Variant,
    plugins: PluginSet | None = None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    merge_adapter: bool = False,
    quantize: str | None = None,
    base=None,
    progress=None,
):
    """``load`` for a variant already looked up (`zoo verify` walks every one);
    ``progress`` (a WorkProgress) is shown the first verification of its weights."""
    plugins = plugins or get_plugins()
    if quantize is not None and device == "auto":
        device = "cpu"  # the int8 kernels are the CPU's
    target = resolve_device(device or "cpu")  # checked before any work: a missing GPU is one line
    target_dtype = resolve_dtype(dtype, target)
    name = variant.name
    check_quantize(quantize, name, target, target_dtype)
    require_components(variant, plugins)  # a missing plugin is named before anything else is tried
    check_variant_budget(variant, plugins)  # a hostile card costs nothing
    if not has_published_weights(variant):
        raise ZooError(
            f"{variant.checkpoint_path}: checkpoint file not found; variant '{name}' has no published weights yet "
            f"(its card records no sha256): {train_command(variant)}"
        )
    tokenizer = load_tokenizer(variant, plugins)
    card = variant.card
    # Weights are read and verified on the CPU whatever the target: the file never
    # decides where tensors go, and the checks see exactly what is on disk.
    if card.adapter is not None:
        # quantized, an adapter is folded in first: the int8 layers replace the ones it wraps
        merge = merge_adapter or quantize is not None
        # The base builds the network this card does (adapter_base checks it), so the
        # budget checked above is the base's too: it is not checked again.
        # Shared only where the network stays float32 on the CPU: placing or casting it would copy the weights.
        shareable = target.type == "cpu" and target_dtype == torch.float32
        network, verification = load_adapted(
            variant,
            plugins,
            catalogue(plugins),
            _build_checked,
            merge=merge,
            loaded_base=base if shareable else None,
            progress=progress,
        )
    else:
        with random_init_skipped():  # the verified load below replaces every weight
            network = _build_checked(variant, plugins)
        packed = _pack_for(network, variant)
        verification = checkpoints.load_verified(
            variant.checkpoint_path,
            card.checkpoint.sha256,
            network,
            card.parameters,
            card=card,
            packed=packed,
            progress=progress,
        )
    network.eval()
    place(network, target, target_dtype)
    if quantize is not None:
        _packed_modules(name).quantize_network(network, quantize, name)
        verification.checks.append(f"quantized {quantize} after the checks")
    if card.tokenizer.sha256 is not None and variant.tokenizer_path is not None:
        verification.checks.append("tokenizer sha256")  # checked by load_tokenizer, before anything was built
    return ZooModel(variant, tokenizer, network, verification)


def _pack_for(network, variant: Variant) -> dict:
    """Packed layers where the checkpoint keeps a GGUF file's quantised blocks
    (zoo_core.loading.packed_modules; its header says which; needs the gguf
    package); returns the check of each packed tensor's values, by name."""
    metadata = checkpoints.read_header(variant.checkpoint_path).get("__metadata__") or {}
    if "zoo.ggml_types" not in metadata:
        return {}
    packed_modules = _packed_modules(variant.name)
    types = packed_modules.header_types(metadata)
    packed_modules.pack_modules(network, types)
    return {
        name: lambda path, shown, rows, kind=kind: packed_modules.check_packed_finite(path, shown, rows, kind)
        for name, kind in types.items()
    }


def _packed_modules(name: str):
    """zoo_core.loading.packed_modules, imported only when a variant has packed layers:
    it needs llama.cpp's gguf package, an extra."""
    try:
        from . import packed_modules
    except ModuleNotFoundError as missing:
        raise ZooError(
            f"variant '{name}' keeps quantised blocks; its layers need llama.cpp's "
            f"gguf package ({missing.name} is missing): pip install 'zoo-lm[gguf]'"
        ) from None
    return packed_modules


def verify_variant_files(variant: Variant, plugins: PluginSet | None = None) -> checkpoints.Verification:
    """Every check ``load_variant`` makes on a variant's files (components, size
    budget, tokenizer sha256, the checkpoint's sha256, names, shapes, dtypes,
    finite values, header card, parameters) without loading it: the network is
    built on the meta device and the checkpoint read in pieces, so memory stays
    flat at any size (installing and pulling a 650 MB variant). An adapter, or a
    network that cannot be built on the meta device, is loaded as `zoo load` would."""
    plugins = plugins or get_plugins()
    card = variant.card
    require_components(variant, plugins)
    if card.adapter is not None or not has_published_weights(variant):
        return load_variant(variant, plugins).verification  # which checks the budget first, as below
    _, network = _checked_budget(variant, plugins)  # the network the check counted, built on meta once
    if network is None:  # the check counted nothing on meta (an architecture that estimates itself)
        config = card.architecture_config()
        try:
            network = build_on_meta(
                lambda: plugins.components["models"].create(card.architecture, dict(config), plugins.components)
            )
        except CannotMeasure:
            return load_variant(variant, plugins).verification
    load_tokenizer(variant, plugins)
    _pack_for(network, variant)
    return checkpoints.verify_streamed(
        variant.checkpoint_path, card.checkpoint.sha256, network, card.parameters, card=card
    )
