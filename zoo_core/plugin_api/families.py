"""Model families as records: what the converters ask, and how they find the record.

A family (Llama, Qwen2, GPT-2, ...) is registered by the plugin that builds its
networks (`register_families` in hookspecs.py) as one record satisfying
`FamilyRecord`. The core's converters (``zoo_core/interop``) hold the
file-format plumbing (reading and bounding files, tokenizers, cards, checks
against transformers and llama.cpp) and ask the record for everything that
depends on the family: config fields, tensor names and layouts, refusals. So
the core never spells a family's tensor or setting names, and a third party
adds a family with one record.

Messages: a record raises `ZooError` with one line; the converter adds the file
it was reading where the record did not name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, runtime_checkable

from ..errors import UnknownName, ZooError
from .manager import PluginSet, get_plugins

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class HFExport:
    """A variant in a family's Hugging Face layout: what `AutoConfig.for_model`
    and `load_state_dict` take. ``tied``: the head is the embedding, so the
    state may leave the head out."""

    model_type: str
    fields: dict[str, Any]
    state: dict[str, Tensor]
    tied: bool


@dataclass(frozen=True)
class GGUFExport:
    """A variant in a family's llama.cpp layout: the ``general.architecture``,
    the architecture's metadata (key, value, ``gguf.GGUFValueType`` name) and
    the tensors under llama.cpp's names, float32, in llama.cpp's row orders."""

    architecture: str
    metadata: list[tuple[str, Any, str]]
    tensors: dict[str, Tensor]


@runtime_checkable
class FamilyRecord(Protocol):
    """One family. Every method that can refuse raises `ZooError` (one line) or
    returns the refusal as text; none of them builds a network."""

    name: str  # recorded in an imported card's ``family``
    title: str  # for people: "Llama", "GPT-2"
    architectures: tuple[str, ...]  # the zoo architectures whose networks it reads and writes; imports build the first
    hf_model_types: tuple[str, ...]  # config.json ``model_type``s `zoo import hf` reads as this family
    hf_class: str  # transformers' class, e.g. "LlamaForCausalLM"
    gguf_architecture: str | None  # llama.cpp's ``general.architecture``, where it has one

    # -- choosing a family for a variant that records none -------------------------
    def claims(self, model: Any) -> bool:
        """Whether the loaded variant is of the kind this family describes
        (its refusal is then the reason shown when no claiming family takes it)."""

    def hf_refusal(self, model: Any) -> str | None:
        """Why the loaded variant has no exact form in this family, or None."""

    # -- Hugging Face ------------------------------------------------------------------
    def config_from_hf(
        self, raw: Mapping[str, Any], path: Path, transformers_config: Callable[[], Any]
    ) -> tuple[dict[str, Any], int]:
        """The card's config and context length of a config.json (``raw``, at
        ``path``; ``transformers_config()`` reads it through transformers' own
        config class, which knows the older field names)."""

    def tensors_from_hf(
        self, config: dict[str, Any], tensors: dict[str, Tensor], path: Path
    ) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """The config (tied embeddings decided by the tensors) and the tensors
        under the architecture's names, from a folder's tensors (read from ``path``)."""

    def to_hf(self, model: Any) -> HFExport:
        """The loaded variant in the family's Hugging Face layout."""

    # -- GGUF --------------------------------------------------------------------------
    def config_from_gguf(self, metadata: Mapping[str, Any], path: Path) -> tuple[dict[str, Any], int]:
        """The card's config and context length of a GGUF file's metadata."""

    def tensors_from_gguf(
        self,
        config: dict[str, Any],
        tensors: Mapping[str, Any],
        dequantize: Callable[[Any], Tensor],
        path: Path,
    ) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """The config and the architecture's tensors of a GGUF file's tensors
        (llama.cpp's name -> the reader's tensor, made float32 by ``dequantize``);
        a tensor outside the layout is refused before any is dequantised."""

    def gguf_refusal(self, model: Any, writers: tuple[str, ...]) -> str | None:
        """Why llama.cpp cannot run the variant in this family's architecture,
        or None (``writers``: the architectures the GGUF export writes)."""

    def to_gguf(self, model: Any) -> GGUFExport:
        """The loaded variant in the family's llama.cpp layout."""

    # -- checks and TransformerLens --------------------------------------------------
    def vocab_size(self, tensors: Mapping[str, Tensor]) -> int:
        """The vocabulary the architecture's tensors hold (an import's tokenizer must match it)."""

    def size_problem(self, config: dict[str, Any], context_length: int, tensors: Mapping[str, Tensor]) -> str | None:
        """Where the config's sizes disagree with the tensors (layer count,
        width, window), found by counting before anything is built; or None."""

    def lens_refusal(self, model: Any) -> str | None:
        """Why the loaded variant has no exact `HookedTransformer` form, or None."""

    def to_lens(self, model: Any) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """`HookedTransformerConfig` fields (plain JSON values) and TransformerLens' state dict."""


@runtime_checkable
class ReadsNanoGPT(FamilyRecord, Protocol):
    """A family whose networks nanoGPT's train.py also writes (GPT-2's)."""

    def config_from_nanogpt(self, model_args: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
        """The card's config and context length of nanoGPT's ``model_args``."""

    def tensors_from_nanogpt(
        self, config: dict[str, Any], state: Mapping[str, Tensor], path: Path
    ) -> dict[str, Tensor]:
        """nanoGPT's state dict under the architecture's names (the head tied to the embedding)."""


def records(plugins: PluginSet | None = None) -> list[FamilyRecord]:
    """Every registered family that can be used, in registration order (built-ins
    first); a record that cannot be imported or lacks the protocol is refused in one line."""
    plugins = plugins or get_plugins()
    components = plugins.components["families"]
    return [family(name, plugins) for name in components.names_in_order() if components.problem(name) is None]


def family(name: str, plugins: PluginSet | None = None) -> FamilyRecord:
    """The record registered as ``name``."""
    plugins = plugins or get_plugins()
    components = plugins.components["families"]
    record = components.factory(name)
    if not isinstance(record, FamilyRecord):
        raise ZooError(
            f"plugin '{components.plugin_of(name)}': family '{name}' is a {type(record).__name__}, not a "
            "family record (zoo_core.plugin_api.families.FamilyRecord)"
        )
    return record


def for_hf_model_type(model_type: Any, path: Path) -> FamilyRecord:
    """The family that imports a config.json of ``model_type``."""
    known = records()
    for record in known:
        if model_type in record.hf_model_types:
            return record
    types = ", ".join(t for record in known for t in record.hf_model_types)
    raise ZooError(f"{path}: model_type {model_type!r}; the layouts that import are {types}")


def for_gguf_architecture(architecture: str, metadata: Mapping[str, Any] | None = None) -> FamilyRecord | None:
    """The family that imports GGUF files of ``architecture``: the one whose
    ``gguf_claims(metadata)`` takes the file (Mixtral's llama files with experts),
    else the one named after it (several families may export as llama.cpp's llama)."""
    known = [record for record in records() if record.gguf_architecture == architecture]
    for record in known:
        claims = getattr(record, "gguf_claims", None)
        if metadata is not None and claims is not None and claims(metadata):
            return record
    return next((record for record in known if record.name == architecture), known[0] if known else None)


def gguf_readers() -> list[str]:
    """The GGUF architectures that import, each once."""
    return list(dict.fromkeys(r.gguf_architecture for r in records() if r.gguf_architecture is not None))


def for_variant(model: Any, purpose: str) -> FamilyRecord:
    """The family a loaded variant is written in: the one its card records, else
    the first family that claims it and takes it. Refused in one line naming the
    reason of the first family that claims it (``purpose``: "Hugging Face", ...)."""
    card = model.card
    recorded = getattr(card, "family", None)
    if recorded:
        try:
            return family(recorded)
        except UnknownName:
            raise ZooError(f"'{card.name}' is of family '{recorded}', which no installed plugin registers") from None
    candidates = [record for record in records() if card.architecture in record.architectures]
    if not candidates:
        writers = sorted({arch for record in records() for arch in record.architectures})
        raise ZooError(
            f"'{card.name}' is a {card.architecture} model; only {' and '.join(writers)} variants map onto "
            f"{purpose} families"
        )
    claiming = [record for record in candidates if record.claims(model)] or candidates
    reasons = [(record, record.hf_refusal(model)) for record in claiming]
    for record, reason in reasons:
        if reason is None:
            return record
    raise ZooError(reasons[0][1])


def for_lens(model: Any) -> FamilyRecord:
    """The family whose record names the variant's heads for TransformerLens: the
    recorded one, else any family of its architecture (they share the naming)."""
    card = model.card
    recorded = getattr(card, "family", None)
    if recorded:
        return family(recorded)
    for record in records():
        if card.architecture in record.architectures:
            return record
    writers = sorted({arch for record in records() for arch in record.architectures})
    raise ZooError(
        f"'{card.name}' is a {card.architecture} model; only {' and '.join(writers)} variants map onto HookedTransformer"
    )
