"""The contracts between the core and its plugins.

These are structural (`typing.Protocol`): a plugin satisfies them by shape, not by
inheritance. ``Tensor`` is imported for type checkers only, so importing this
module does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from torch import Tensor


@runtime_checkable
class Tokenizer(Protocol):
    """Text to token ids and back."""

    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; raises ZooError for text it cannot represent."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; bytes that are not valid UTF-8 decode with replacement."""


class TokenizerSpecView(Protocol):
    """What a tokenizer factory, ``factory(spec, path)``, is handed as ``spec``:
    the card's tokenizer section, read-only, by attribute.

    Loading hands the card's pydantic ``zoo_core.catalogue.cards.TokenizerSpec``;
    a factory should read only these attributes, so that any object holding
    them (a test's stand-in) works too.
    """

    kind: str  # the registered tokenizer's name
    vocab_size: int  # the card's vocabulary size: check the file against it
    file: str | None  # the data file as the card names it (the factory's ``path`` is it resolved)
    sha256: str | None  # the file's checksum, already checked before the factory is called


@runtime_checkable
class PositionEncoding(Protocol):
    """Where a token is, told to the network.

    Two families exist and the contract leaves room for both: encodings that add
    to the residual stream before the first block (learned, sinusoidal), and
    encodings that act inside attention, by rotating queries and keys (RoPE) or
    by biasing the scores (ALiBi). An encoding implements all three methods and
    makes the ones it does not use the identity (or ``None`` for ``bias``).
    ``positions`` are absolute indices, shape (T,), so cached decoding can pass
    positions that do not start at zero.
    """

    def embed(self, x: "Tensor", positions: "Tensor") -> "Tensor":
        """The residual stream (B, T, C) after adding position information."""

    def rotate(
        self, q: "Tensor", k: "Tensor", q_positions: "Tensor", k_positions: "Tensor"
    ) -> tuple["Tensor", "Tensor"]:
        """Queries and keys (B, H, T, D) after position-dependent rotation."""

    def bias(self, q_positions: "Tensor", k_positions: "Tensor") -> "Tensor | None":
        """An additive bias for attention scores, (H, Tq, Tk), or None."""


@runtime_checkable
class Block(Protocol):
    """One transformer block: attention and feed-forward with residuals and norms."""

    def __call__(
        self,
        x: "Tensor",
        positions: "Tensor",
        encoding: PositionEncoding,
        need_weights: bool = False,
        cache: Any = None,
    ) -> tuple["Tensor", "Tensor | None"]:
        """(B, T, C) -> (B, T, C), and the attention weights (B, H, T, T) when asked.

        ``cache`` (a layer's KVCache) is passed only while sampling with a KV
        cache; a block without the parameter is simply sampled uncached."""


# What a language model's context is (its optional ``context_kind`` attribute).
BOUNDED, UNBOUNDED = "bounded", "unbounded"
CONTEXT_KINDS = (BOUNDED, UNBOUNDED)


@runtime_checkable
class LanguageModel(Protocol):
    """Token ids to next-token logits.

    ``context_kind`` is optional. ``"bounded"`` (the default when absent): the
    model sees a window of at most ``context_length`` tokens; sampling crops to
    it and scoring slides windows over a text. ``"unbounded"``: the model
    carries a state forward (a recurrent network); ``context_length`` is then
    only its training window (the truncated-BPTT length, and the chunk size in
    which scoring feeds a text), and the model implements ``step``::

        step(idx (B, T), state or None) -> (logits (B, T, V), new state)

    where None is the start of the text. Feeding a sequence through ``step``
    in chunks, carrying the state, gives the logits of one call on all of it;
    ``__call__`` starts from no state. Sampling then costs the same for every
    token however long the sample, and scoring predicts each token from all the
    text before it.
    """

    context_length: int

    def __call__(self, idx: "Tensor", targets: "Tensor | None" = None) -> tuple["Tensor", "Tensor | None"]:
        """Logits (B, T, V) and, when targets are given, the mean cross-entropy."""

    def attention_maps(self, idx: "Tensor") -> list["Tensor"]:
        """Per-layer attention weights (B, H, T, T), in layer order (empty if none)."""


@runtime_checkable
class Trainer(Protocol):
    """Turns a freshly built network and a card's recipe into weights and metrics.

    `zoo train` builds the network (seeded with the recipe's seed), hands it to
    ``run`` with the run's ``zoo_core.training.TrainingJob``, as it is, and writes
    whatever weights the network holds afterwards. The job carries everything:
    the card, the recipe with the command's overrides, the corpus, the progress
    display, the state to resume from and ``on_checkpoint``, the placement.
    ``uses_corpus`` False (hand-set weights) means the job carries no corpus and
    `zoo train` refuses --steps, --seed and --data.
    """

    uses_corpus: bool

    def run(self, network: Any, job: Any) -> Any:
        """Train ``network`` in place as ``job`` says; return a ``zoo_core.training.TrainingResult``."""


@runtime_checkable
class Adapter(Protocol):
    """Applies an adapter variant's tensors to its base's network (see ``register_adapters``).

    Made by ``factory(config)`` from the card's ``adapter.config``. Loading never
    runs code from the adapter file: the file only holds tensors, checked by name
    and shape against ``tensor_shapes`` before ``apply`` sees them.
    """

    def tensor_shapes(self, network: Any) -> dict[str, tuple[int, ...]]:
        """The names and shapes of the tensors this adapter needs for ``network`` (the base's)."""

    def apply(self, network: Any, tensors: dict[str, "Tensor"], merge: bool = False) -> None:
        """Change ``network`` in place to compute the adapted model: on the fly, or
        (``merge=True``) with the adapter folded into the base's weights."""


# What each kind of registered factory must return, and the members checked.
PROTOCOLS: dict[str, tuple[type, tuple[str, ...], tuple[str, ...]]] = {
    # kind: (protocol, methods, attributes)
    "tokenizers": (Tokenizer, ("encode", "decode"), ("vocab_size",)),
    "positions": (PositionEncoding, ("embed", "rotate", "bias"), ()),
    "blocks": (Block, ("__call__",), ()),
    "models": (LanguageModel, ("__call__", "attention_maps"), ("context_length",)),
    "trainers": (Trainer, ("run",), ("uses_corpus",)),
    "adapters": (Adapter, ("tensor_shapes", "apply"), ()),
}


def conformance_problem(kind: str, made: Any) -> str | None:
    """Why ``made`` does not satisfy ``kind``'s protocol, in words (None if it does).

    Checked by shape, without importing torch: the methods must be callable and
    the attributes present (integers where the protocol says int)."""
    if kind not in PROTOCOLS:
        return None
    protocol, methods, attributes = PROTOCOLS[kind]
    missing = [f"{name}()" for name in methods if not callable(getattr(made, name, None))]
    missing += [name for name in attributes if not hasattr(made, name)]
    wrong = [
        f"{name} (an int, not {type(getattr(made, name)).__name__})"
        for name in ("vocab_size", "context_length")
        if name in attributes
        and hasattr(made, name)
        and (not isinstance(getattr(made, name), int) or isinstance(getattr(made, name), bool))
    ]
    what = type(made).__name__ if made is not None else "None"
    if kind == "models" and not missing and not wrong:
        return _context_problem(made, what)
    if not missing and not wrong:
        return None
    parts = ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"needs {', '.join(wrong)}"] if wrong else [])
    return f"a {what}, which {' and '.join(parts)} (zoo_core.plugin_api.protocols.{protocol.__name__})"


def context_kind(model: Any) -> str:
    """``"bounded"`` or ``"unbounded"``: what ``model`` declares (bounded when it says nothing)."""
    return getattr(model, "context_kind", BOUNDED)


def _context_problem(made: Any, what: str) -> str | None:
    kind = context_kind(made)
    if kind not in CONTEXT_KINDS:
        return (
            f"a {what}, whose context_kind {kind!r} is neither 'bounded' nor 'unbounded' "
            f"(zoo_core.plugin_api.protocols.LanguageModel)"
        )
    if kind == UNBOUNDED and not callable(getattr(made, "step", None)):
        return (
            f"a {what}, whose context_kind is 'unbounded' but which lacks step(idx, state) -> (logits, state) "
            f"(zoo_core.plugin_api.protocols.LanguageModel)"
        )
    return None
