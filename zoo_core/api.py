"""The Python API: the same reach as the CLI.

    >>> import zoo_core
    >>> [card.name for card in zoo_core.list_variants("transformer-*")]
    >>> model = zoo_core.load("transformer-6b-sin")
    >>> model.generate("ROMEO:", max_new_tokens=50, seed=1)
"""

from __future__ import annotations

from pathlib import Path

from .cards import ModelCard
from .errors import ZooError
from .plugin_manager import PluginSet, get_plugins
from .registry import Catalogue, Variant, read_registry_file
from .user_catalogue import user_variant_files


def catalogue(plugins: PluginSet | None = None) -> Catalogue:
    """Every variant every loaded plugin contributes.

    A broken registry file of the zoo's own is an error; a third-party plugin's
    broken file is reported against that plugin and skipped.
    """
    plugins = plugins or get_plugins()
    result = Catalogue()
    for path, plugin in plugins.variant_files:
        info = plugins.plugins[plugin]
        try:
            result.add_all(read_registry_file(Path(path), plugin))
        except ZooError as exc:
            if info.builtin:
                raise
            info.errors.append(str(exc))
    for path, layer in user_variant_files():  # the user's own layer comes last: it cannot shadow a plugin's variant
        result.add_all(read_registry_file(path, layer))
    return result


def list_variants(pattern: str | None = None) -> list[ModelCard]:
    """Cards of the variants whose names match ``pattern`` (shell wildcards)."""
    return [variant.card for variant in catalogue().match(pattern)]


def get_variant(name: str) -> Variant:
    return catalogue().get(name)


def load_tokenizer(variant: Variant, plugins: PluginSet | None = None):
    plugins = plugins or get_plugins()
    spec = variant.card.tokenizer
    return plugins.components["tokenizers"].create(spec.kind, spec, variant.tokenizer_path)


def build_network(variant: Variant, plugins: PluginSet | None = None):
    """A freshly initialised network for the card (weights not loaded)."""
    plugins = plugins or get_plugins()
    card = variant.card
    factory = plugins.components["models"].factory(card.architecture)
    try:
        return factory(card.architecture_config(), plugins.components)
    except ZooError:
        raise
    except (TypeError, ValueError) as exc:
        raise ZooError(f"variant '{card.name}': cannot build architecture '{card.architecture}': {exc}") from exc


def load(name: str, plugins: PluginSet | None = None):
    """Build the variant's network and load its verified weights."""
    plugins = plugins or get_plugins()
    return load_variant(catalogue(plugins).get(name), plugins)


def has_published_weights(variant: Variant) -> bool:
    """False for a variant declared before it was trained: no checksum, no file."""
    return variant.card.checkpoint.sha256 is not None or variant.checkpoint_path.exists()


def load_variant(variant: Variant, plugins: PluginSet | None = None):
    """``load`` for a variant already looked up (`zoo verify` walks every one)."""
    from .checkpoints import load_verified
    from .model import ZooModel

    plugins = plugins or get_plugins()
    name = variant.name
    if not has_published_weights(variant):
        raise ZooError(
            f"{variant.checkpoint_path}: checkpoint file not found; variant '{name}' has no published weights yet "
            f"(its card records no sha256): `zoo train {name} --publish` makes them"
        )
    tokenizer = load_tokenizer(variant, plugins)
    network = build_network(variant, plugins)
    card = variant.card
    verification = load_verified(variant.checkpoint_path, card.checkpoint.sha256, network, card.parameters, card=card)
    network.eval()
    return ZooModel(variant, tokenizer, network, verification)
