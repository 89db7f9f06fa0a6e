"""The contracts between the core and its plugins.

These are structural (`typing.Protocol`): a plugin satisfies them by shape, not by
inheritance. ``Tensor`` is imported for type checkers only, so importing this
module does not import torch.

Besides the contract of each kind of component (``PROTOCOLS``, checked when a
factory returns), a language model may offer capabilities (``CAPABILITIES``:
cached decoding, row batching, an unbounded context, a task model, ...); the
core asks ``implements(network, capability)`` before it uses one.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from pathlib import Path

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

        The contract that gives a block cached decoding, row batching and hook
        points with its one forward (docs/plugins.md, "The KV-cache contract"):
        tokens mix only in the attention, which receives ``positions``,
        ``encoding`` and ``cache`` exactly as the block did; everything else
        works position by position. ``positions`` are (T,), or (B, T) for rows
        at positions of their own (a serving step). ``cache`` (one layer's: a
        ``KVCache`` or a row batch's slots) is passed only while decoding with
        a cache; its ``append(k, v, positions)`` stores the new keys and values
        and returns every key and value to attend over with their positions,
        each query seeing those not after its own. A block without the
        parameter is simply sampled uncached."""


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
    text before it. (An unbounded model is the capability ``UnboundedContext``.)
    """

    context_length: int

    def __call__(self, idx: "Tensor", targets: "Tensor | None" = None) -> tuple["Tensor", "Tensor | None"]:
        """Logits (B, T, V) and, when targets are given, the mean cross-entropy."""

    def attention_maps(self, idx: "Tensor") -> list["Tensor"]:
        """Per-layer attention weights (B, H, T, T), in layer order (empty if none)."""


# -- capabilities: what a language model may offer beyond LanguageModel --------------
#
# Each is a protocol a model satisfies or not, and the core asks
# ``implements(network, Capability)`` before it uses one (never the network's
# attributes one by one); docs/plugins.md ("Capabilities") says what the zoo
# gives a model that has each. A model without a capability is treated as it
# always was; `zoo check-plugin` reports a capability a model has only part of
# (``capability_problem``).


class DecodingCache(Protocol):
    """What ``CachedDecoding.make_cache()`` returns; the zoo reads how many tokens it holds."""

    length: int


@runtime_checkable
class CachedDecoding(Protocol):
    """Sampled with a KV cache (docs/plugins.md, "The KV-cache contract").

    ``supports_kv_cache`` switches it on; False declines it (the zoo's
    transformer says False when one of its blocks takes no ``cache``)."""

    supports_kv_cache: bool

    def make_cache(self) -> DecodingCache:
        """An empty cache: the prompt's window is fed through it once, then one token at a time."""

    def __call__(
        self, idx: "Tensor", targets: "Tensor | None" = None, cache: DecodingCache | None = None
    ) -> tuple["Tensor", "Tensor | None"]:
        """As ``LanguageModel``'s, and with ``cache``: attend over what it holds
        as well, add ``idx``'s keys and values to it and advance ``cache.length``."""


class RowBatch(Protocol):
    """What ``RowBatching.make_row_batch(max_rows)`` returns: rows of different
    lengths, each with its own keys and values, decoded one token per row per step."""

    rows: list[Any]  # the callers' handles, in the order ``step`` returns their logits

    def accepts(self, model: Any, cache: DecodingCache) -> bool:
        """Whether a row whose prompt went through ``cache`` can join."""

    def add(self, handle: Any, cache: DecodingCache) -> None:
        """Take that row in."""

    def remove(self, handle: Any) -> None:
        """Let a row go."""

    def room(self, handle: Any) -> bool:
        """Whether the row can take another token without its window sliding."""

    def step(self, tokens: list[int]) -> "Tensor":
        """One token per row, in ``rows`` order; the next-token logits (rows, V)."""


@runtime_checkable
class RowBatching(CachedDecoding, Protocol):
    """Rows of different lengths decoded together: `zoo serve`'s continuous batching."""

    def make_row_batch(self, max_rows: int) -> RowBatch:
        """An empty batch of up to ``max_rows`` rows."""


@runtime_checkable
class UnboundedContext(Protocol):
    """A state carried forward instead of a window (see ``LanguageModel``).

    ``context_kind = "unbounded"`` switches it on; "bounded" declines it."""

    context_kind: str

    def step(self, idx: "Tensor", state: Any) -> tuple["Tensor", Any]:
        """Logits (B, T, V) of ``idx`` (B, T) read after ``state`` (None: the start), and the state after it."""


@runtime_checkable
class Inspectable(Protocol):
    """Logits readable off the residual stream (the logit lens): the stream after
    the last block goes through ``lm_head(final_norm(x))``."""

    final_norm: Callable[["Tensor"], "Tensor"]
    lm_head: Callable[["Tensor"], "Tensor"]


@runtime_checkable
class CappedLogits(Protocol):
    """Logits bounded after the head (a soft-cap): the logit lens applies it too."""

    def cap_logits(self, head_output: "Tensor") -> "Tensor":
        """The head's output as the model's logits."""


@runtime_checkable
class TaskModel(Protocol):
    """Answers a question instead of continuing text (the puzzle)."""

    def ask(self, tokenizer: Tokenizer, prompt: str, explain: bool = False, png: "Path | str | None" = None) -> str:
        """The answer, as `zoo sample` prints it (``explain``: with the reasons; ``png``: a picture there)."""


@runtime_checkable
class SelfEvaluating(Protocol):
    """Measures itself: `zoo eval` prints its report instead of the losses over text."""

    def evaluate(self, tokenizer: Tokenizer) -> dict[str, Any]:
        """The report (JSON-ready)."""


@runtime_checkable
class Traceable(Protocol):
    """Shows one sentence's inner values."""

    def trace(self, idx: "Tensor") -> dict[str, Any]:
        """For one sentence's ids: named tensors, and under "attention" each named head's (T, T) map."""


@runtime_checkable
class NamedHeads(Protocol):
    """Names its attention heads."""

    head_names: list[str]


class SlotNames(Protocol):
    """A model's ``slots``: the names of its residual stream's dimensions, in order."""

    names: list[str]


@runtime_checkable
class NamedSlots(Protocol):
    """Names the slots (dimensions) of its residual stream."""

    slots: SlotNames


@runtime_checkable
class RoleVerifying(Protocol):
    """Checks the role it states for each head, by ablation (`zoo inspect --verify-roles`)."""

    def verify_roles(self, tokenizer: Tokenizer) -> dict[str, Any]:
        """The report zoo_core.inspection.roles describes."""


@runtime_checkable
class AnswerAblating(Protocol):
    """Says how its answers change when heads are zeroed (`zoo inspect --ablate` on a task model)."""

    def ablate_answers(self, tokenizer: Tokenizer, groups: Any) -> dict[str, Any]:
        """For each group of heads (LAYER.HEAD pairs; None: each head alone), the answers that change."""


@runtime_checkable
class RoutedExperts(Protocol):
    """Sends each token to some of its experts (a mixture of experts; `zoo inspect --routing`)."""

    def routing_points(self) -> dict[int, tuple[str, str]]:
        """Per layer with a router, its hook points: the router's probabilities over the
        experts (B, T, E) and the experts each token went to (B, T, k), most probable first."""


CAPABILITIES: tuple[type, ...] = (
    CachedDecoding,
    RowBatching,
    UnboundedContext,
    Inspectable,
    CappedLogits,
    TaskModel,
    SelfEvaluating,
    Traceable,
    NamedHeads,
    NamedSlots,
    RoleVerifying,
    AnswerAblating,
    RoutedExperts,
)


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
    missing += [name for name in attributes if not _present(made, name)]
    wrong = [
        f"{name} (an int, not {type(getattr(made, name)).__name__})"
        for name in ("vocab_size", "context_length")
        if name in attributes
        and _present(made, name)
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


# Attributes that switch a capability on (when the test holds) or decline it (when not).
_SWITCHES: dict[str, Callable[[Any], bool]] = {
    "supports_kv_cache": bool,
    "context_kind": lambda kind: kind == UNBOUNDED,
}
# The members that claim a capability where not every member it adds does: a vocabulary
# head named lm_head is every zoo model's (the bigram's too), a final norm is not.
_CLAIMED_BY: dict[type, tuple[str, ...]] = {Inspectable: ("final_norm",)}
_ABSENT = object()


def _present(made: Any, name: str) -> bool:
    return getattr(made, name, _ABSENT) is not _ABSENT


def _declared(protocol: type) -> tuple[list[str], list[str]]:
    """The methods and the attributes written in ``protocol``'s own body."""
    methods = [
        name
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) and (name == "__call__" or not name.startswith("_"))
    ]
    return methods, list(inspect.get_annotations(protocol))


@cache
def members(protocol: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The methods and the attributes ``protocol`` declares, with those of the protocols it extends."""
    methods: list[str] = []
    attributes: list[str] = []
    for layer in reversed([c for c in protocol.__mro__ if c.__module__ == __name__]):
        declared_methods, declared_attributes = _declared(layer)
        methods += [name for name in declared_methods if name not in methods]
        attributes += [name for name in declared_attributes if name not in attributes]
    return tuple(methods), tuple(attributes)


def implements(made: Any, capability: type) -> bool:
    """Whether ``made`` offers ``capability``: every method callable, every
    attribute present, and switched on where an attribute switches it.

    Asked this way rather than by ``isinstance``: since Python 3.12 that looks
    members up statically and misses a torch module's submodules (``lm_head``),
    and it cannot tell a switch that is off from one that is on."""
    methods, attributes = members(capability)
    return (
        all(callable(getattr(made, name, None)) for name in methods)
        and all(_present(made, name) for name in attributes)
        and all(_SWITCHES[name](getattr(made, name)) for name in attributes if name in _SWITCHES)
    )


def capability_problem(made: Any, capability: type) -> str | None:
    """What keeps ``made`` from offering a capability it has part of, in one line
    (None when it has all of it, none of it, or declines it by its switch).

    Beyond ``implements``, each method must take the calls its protocol declares:
    with the arguments that have no default, with those that have one by keyword,
    and with all of them in order."""
    methods, attributes = members(capability)
    if any(
        not _SWITCHES[name](getattr(made, name)) for name in attributes if name in _SWITCHES and _present(made, name)
    ):
        return None
    # Claimed by any member the capability itself adds (RowBatching's make_row_batch,
    # not the make_cache it extends); every model has a __call__.
    added_methods, added_attributes = _declared(capability)
    claiming = _CLAIMED_BY.get(capability, (*added_methods, *added_attributes))
    if not any(_present(made, name) for name in claiming if name != "__call__"):
        return None
    own = [name for name in (*methods, *attributes) if name != "__call__"]
    shown = {name: f"{name}()" if name in methods else name for name in own}
    what = f"a {type(made).__name__}, which"
    where = f"(zoo_core.plugin_api.protocols.{capability.__name__})"
    missing = [shown[name] for name in own if not _present(made, name)]
    if missing:
        has = ", ".join(shown[name] for name in own if _present(made, name))
        return f"{what} has {has} but lacks {', '.join(missing)} {where}"
    for name in methods:
        problem = _call_problem(made, capability, name)
        if problem:
            return f"{what} {problem} {where}"
    return None


def _call_problem(made: Any, protocol: type, name: str) -> str | None:
    """Why ``made.name`` cannot be called as ``protocol`` declares it (None if it can)."""
    function = getattr(made, name)
    if not callable(function):
        return f"has {name} but it is not callable"
    if name == "__call__":  # a torch module's __call__ takes anything and hands it to forward
        function = getattr(made, "forward", function)
    declared = list(inspect.signature(getattr(protocol, name)).parameters.values())[1:]  # without self
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check it against
        return None
    required = [p.name for p in declared if p.default is p.empty]
    defaults = {p.name: p.default for p in declared if p.default is not p.empty}
    call = f"{name}({', '.join([*required, *(f'{k}={v!r}' for k, v in defaults.items())])})"
    for args, kwargs in ((required, {}), (required, defaults), ([*required, *defaults], {})):
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            return f"has {getattr(function, '__name__', name)}{signature} where the zoo calls {call}: {exc}"
    return None
