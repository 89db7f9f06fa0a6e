"""The plugin authors' testing kit: ready checks for a plugin's own tests, and
what `zoo check-plugin NAME` runs on everything a plugin registers.

Each ``assert_*`` function raises ``AssertionError`` with a sentence saying what
went wrong, so it reads well inside pytest::

    from zoo_core.kit import testing

    def test_my_encoding_keeps_the_contracts():
        build = testing.tiny_transformer_builder(positions="my-encoding")
        testing.assert_causal(build())
        testing.assert_kv_cache_matches_uncached(build())
        testing.assert_checkpoint_round_trip(build)
        testing.assert_deterministic(build)

A model that carries a state (``context_kind = "unbounded"``) is checked on
its own terms instead of the KV cache's: ``assert_chunked_step_matches_whole``,
``assert_state_does_not_grow``, ``assert_samples_past_window_in_constant_work``.

``check_plugin(name)`` runs every check that applies to what the plugin
registered and returns one ``CheckResult`` per check (none is skipped silently:
a check that cannot run says why, with status ``skip``).
"""

from __future__ import annotations

import copy
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import torch
from safetensors.torch import load_file

from ..catalogue.cards import Recipe
from ..catalogue.suggestions import train_command
from ..corpus.batches import Corpus, split_text
from ..corpus.datasets import read_dataset
from ..errors import ZooError
from ..inference.sampling import sample_tokens
from ..inference.settings import SamplingSettings
from ..loading.api import build_network, catalogue, has_published_weights, load_tokenizer, load_variant
from ..plugin_api.manager import PluginSet, get_plugins
from ..plugin_api.protocols import (
    CAPABILITIES,
    UNBOUNDED,
    CachedDecoding,
    LanguageModel,
    TaskModel,
    capability_problem,
    conformance_problem,
    context_kind,
    implements,
)
from ..storage.checkpoints import save_checkpoint
from ..training.job import TrainingJob

# The sizes the kit builds things at, by the names the plugin API gives them (the
# factory keywords of register_positions and register_blocks, and a model's config);
# an architecture adds what else a tiny network of it needs (register_models' tiny=).
TINY = {"vocab_size": 48, "context_length": 8, "d_model": 16, "n_head": 2}


@dataclass
class CheckResult:
    subject: str  # e.g. "position 'alibi'"
    check: str  # e.g. "causality"
    status: str  # "ok", "FAIL" or "skip"
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status != "FAIL"


# -- single checks, for a plugin's own tests ---------------------------------------------


def assert_conforms(kind: str, made: Any) -> None:
    """``made`` satisfies the protocol of ``kind`` ('tokenizers', 'positions', 'blocks', 'models', 'trainers', 'adapters')."""
    problem = conformance_problem(kind, made)
    assert problem is None, f"{kind[:-1]}: {problem}"


def assert_capabilities_complete(model) -> list[str]:
    """Each capability ``model`` has a part of (``protocols.CAPABILITIES``, and
    ``LanguageModel`` itself) it has whole, its methods taking the calls their
    protocol declares; returns the names of the capabilities it offers."""
    for capability in (LanguageModel, *CAPABILITIES):
        problem = capability_problem(model, capability)
        assert problem is None, f"model: {problem}"
    return [capability.__name__ for capability in CAPABILITIES if implements(model, capability)]


def check_model_protocols(subject: str, build: Callable[[], Any]) -> CheckResult:
    """A model's line "builds and satisfies the protocol": ``LanguageModel``, and
    every capability it has a part of, whole; the line names those it offers."""
    offered: list[str] = []

    def conforms() -> None:
        model = build()
        assert_conforms("models", model)
        offered.extend(assert_capabilities_complete(model))

    result = _outcome(subject, "builds and satisfies the protocol", conforms)
    if result.passed:
        result.detail = f"offers {', '.join(offered)}" if offered else "no capability beyond LanguageModel"
    return result


def _random_ids(model, length: int, seed: int, vocab_size: int | None = None) -> torch.Tensor:
    vocab = vocab_size or _vocab_size(model)
    return torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(seed))


def _vocab_size(model) -> int:
    """The network's vocabulary, from its output layer (what every zoo model ends in)."""
    with torch.no_grad():
        logits, _ = model(torch.zeros(1, 1, dtype=torch.long))
    return logits.shape[-1]


@torch.no_grad()
def assert_causal(model, length: int | None = None, seed: int = 0) -> None:
    """No information flows from future tokens: changing token t leaves every
    earlier position's logits unchanged (and changes position t's)."""
    model.eval()
    length = min(length or model.context_length, model.context_length)
    assert length >= 2, "causality needs a window of at least two tokens"
    ids = _random_ids(model, length, seed)
    vocab = _vocab_size(model)
    before, _ = model(ids)
    for t in range(1, length):
        changed = ids.clone()
        changed[0, t:] = (changed[0, t:] + 1 + t) % vocab
        after, _ = model(changed)
        leaked = (after[0, :t] - before[0, :t]).abs().max().item()
        assert leaked <= 1e-5, (
            f"changing tokens from position {t} on changed the logits of earlier positions by {leaked:.3g}: attention sees the future"
        )


class _PositionCounter:
    """Counts the token positions a network is run on (its forward's first
    argument) and keeps the last position's logits of every call."""

    def __init__(self, model) -> None:
        self.calls: list[int] = []
        self.logits: list[torch.Tensor] = []
        self._handles = [
            model.register_forward_pre_hook(self._count, with_kwargs=True),
            model.register_forward_hook(self._keep),
        ]

    def _count(self, module, args, kwargs):
        ids = args[0] if args else kwargs["idx"]
        self.calls.append(ids.shape[1])

    def _keep(self, module, args, output):
        self.logits.append(output[0][:, -1].detach().clone())

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()

    @property
    def positions(self) -> int:
        return sum(self.calls)


def assert_kv_cache_matches_uncached(model, new_tokens: int | None = None, seed: int = 0) -> None:
    """Sampling with the KV cache gives the very tokens uncached sampling gives,
    past the end of the window, and the cache was really used: the cached run
    processes fewer positions, most steps a single new token."""
    assert implements(model, CachedDecoding), capability_problem(model, CachedDecoding) or (
        "the model does not support a KV cache (supports_kv_cache is false; see docs/plugins.md, 'The KV-cache contract')"
    )
    model.eval()
    window = model.context_length
    prompt = _random_ids(model, max(1, window // 2), seed)
    settings = SamplingSettings(max_new_tokens=new_tokens or window + 4)  # past the window: the cache must be refilled
    runs: dict[bool, tuple[torch.Tensor, _PositionCounter]] = {}
    for use_cache in (False, True):
        counter = _PositionCounter(model)
        try:
            tokens = sample_tokens(
                model, prompt, settings.replace(use_cache=use_cache), torch.Generator().manual_seed(seed)
            )
        finally:
            counter.close()
        runs[use_cache] = (tokens, counter)
    (plain, uncached), (fast, cached) = runs[False], runs[True]
    # Logits, not just tokens: a tiny untrained network's near-uniform draws would
    # often pick the same token from wrong logits.
    for step, (expected, got) in enumerate(zip(uncached.logits, cached.logits)):
        gap = (expected - got).abs().max().item()
        assert gap <= 1e-4, (
            f"cached sampling diverges from uncached at new token {step + 1} (window {window}): logits differ by {gap:.3g}"
        )
    differ = (plain != fast).nonzero()
    assert not len(differ), f"cached sampling diverges from uncached at token {differ[0, 1].item()} (window {window})"
    single = sum(1 for n in cached.calls if n == 1)
    assert cached.positions < uncached.positions and single >= min(settings.max_new_tokens, window) // 2, (
        f"the cache was not used: the cached run processed {cached.positions} positions "
        f"({single} single-token steps), the uncached {uncached.positions}"
    )


# How far chunked and whole-sequence logits of an unbounded model may differ:
# float32 kernels may sum a sequence's steps in another order when it comes in pieces.
CARRIED_TOLERANCE = 1e-4


def _state_size(state: Any) -> int:
    """Elements in a model's state: its tensors, however nested in tuples, lists or dicts."""
    if isinstance(state, torch.Tensor):
        return state.numel()
    if isinstance(state, dict):
        return sum(_state_size(value) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(_state_size(value) for value in state)
    return 0


@torch.no_grad()
def assert_chunked_step_matches_whole(model, length: int | None = None, seed: int = 0) -> None:
    """An unbounded model's ``step``, fed a sequence in pieces with the state
    carried, gives the logits of one call on the whole sequence (within
    ``CARRIED_TOLERANCE``), and so does ``step`` from no state in one piece."""
    model.eval()
    window = model.context_length
    length = length or 3 * window + 5  # well past the training window
    ids = _random_ids(model, length, seed)
    whole, _ = model(ids)
    stepped, _ = model.step(ids, None)
    gap = (whole - stepped).abs().max().item()
    assert gap <= CARRIED_TOLERANCE, f"step(ids, None) and model(ids) differ by {gap:.3g}: both start from no state"
    # Uneven pieces: one token, half a window, a window and a half, then the rest.
    cuts = [1, 1 + max(1, window // 2), 1 + max(1, window // 2) + max(1, 3 * window // 2), length]
    pieces, state, start = [], None, 0
    for end in cuts:
        if end > start:
            logits, state = model.step(ids[:, start:end], state)
            assert logits.shape[1] == end - start, f"step returned {logits.shape[1]} positions for {end - start} tokens"
            pieces.append(logits)
            start = end
    gap = (torch.cat(pieces, dim=1) - whole).abs().max().item()
    assert gap <= CARRIED_TOLERANCE, (
        f"feeding {length} tokens through step() in pieces ({', '.join(str(p.shape[1]) for p in pieces)}) with the "
        f"state carried gives logits {gap:.3g} away from one call on all of them (tolerance {CARRIED_TOLERANCE})"
    )


@torch.no_grad()
def assert_state_does_not_grow(model, seed: int = 0) -> None:
    """An unbounded model's state after one window of text is as large as
    after ten: what it carries does not grow with the text."""
    model.eval()
    window = model.context_length
    ids = _random_ids(model, 10 * window, seed)
    _, state = model.step(ids[:, :window], None)
    first = _state_size(state)
    for start in range(window, ids.shape[1], window):
        _, state = model.step(ids[:, start : start + window], state)
    last = _state_size(state)
    assert first > 0, "step() returned a state with no tensors: nothing is carried forward"
    assert last == first, (
        f"the state grew from {first:,} elements after {window} tokens to {last:,} after {10 * window}"
    )


class _StepCounter:
    """Counts the tokens an unbounded model's ``step`` is given, call by call,
    and the calls of the model itself (the whole-sequence path)."""

    def __init__(self, model) -> None:
        self.model, self.whole_calls = model, 0
        self.steps: list[int] = []
        original = model.step

        def counted(idx, state=None):
            self.steps.append(idx.shape[1])
            return original(idx, state)

        model.step = counted
        self._hook = model.register_forward_pre_hook(self._count_whole)

    def _count_whole(self, module, args) -> None:
        self.whole_calls += 1

    def close(self) -> None:
        del self.model.step  # the instance attribute: the class's method shows again
        self._hook.remove()


def assert_samples_past_window_in_constant_work(model, new_tokens: int | None = None, seed: int = 0) -> None:
    """Sampling an unbounded model far past its training window feeds the prompt
    once and then exactly one token per step: the positions fed are the
    prompt's plus one per drawn token but the last, and the state stays one size."""
    model.eval()
    window = model.context_length
    prompt = _random_ids(model, max(1, window // 2), seed)
    new_tokens = new_tokens or 4 * window + 3
    counter = _StepCounter(model)
    try:
        tokens = sample_tokens(
            model, prompt, SamplingSettings(max_new_tokens=new_tokens), torch.Generator().manual_seed(seed)
        )
    finally:
        counter.close()
    assert tokens.shape[1] == prompt.shape[1] + new_tokens, (
        f"{tokens.shape[1] - prompt.shape[1]} tokens drawn of {new_tokens}"
    )
    fed = sum(counter.steps)
    expected = prompt.shape[1] + new_tokens - 1
    assert counter.whole_calls == 0 and fed == expected, (
        f"sampling {new_tokens} tokens after a {prompt.shape[1]}-token prompt fed {fed:,} positions through step() "
        f"(and called the model {counter.whole_calls} times), not the {expected:,} of one pass over the text"
    )
    after_prompt = counter.steps[-(new_tokens - 1) :] if new_tokens > 1 else []
    assert all(n == 1 for n in after_prompt), "after the prompt, step() must be given one token at a time"


def assert_checkpoint_round_trip(build: Callable[[], Any], seed: int = 0) -> None:
    """Weights saved as a zoo checkpoint (safetensors) load into a fresh network
    by the same names and shapes and give the same logits."""
    torch.manual_seed(seed)
    original = build().eval()
    fresh = build().eval()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "round-trip.safetensors"
        try:
            save_checkpoint(path, original.state_dict(), {"name": "round-trip"})
        except RuntimeError as exc:  # safetensors refuses tensors sharing memory (tied weights)
            raise AssertionError(f"the weights cannot be saved as safetensors: {exc}") from None
        missing, unexpected = fresh.load_state_dict(load_file(str(path)), strict=False)
    assert not missing and not unexpected, f"checkpoint names differ: missing {missing}, unexpected {unexpected}"
    ids = _random_ids(original, min(4, original.context_length), seed)
    with torch.no_grad():
        assert torch.equal(original(ids)[0], fresh(ids)[0]), "the reloaded network computes different logits"


def assert_deterministic(build: Callable[[], Any], seed: int = 0) -> None:
    """One seed, one network and one sample: building twice from the same seed
    gives the same weights, and sampling twice with the same generator the same tokens."""
    networks = []
    for _ in range(2):
        torch.manual_seed(seed)
        networks.append(build().eval())
    first, second = (n.state_dict() for n in networks)
    differing = [name for name in first if not torch.equal(first[name], second[name])]
    assert not differing, f"the same seed built different weights: {', '.join(differing[:3])}"
    prompt = _random_ids(networks[0], 2, seed)
    settings = SamplingSettings(max_new_tokens=6)
    samples = [sample_tokens(n, prompt, settings, torch.Generator().manual_seed(seed)) for n in networks]
    assert torch.equal(*samples), "the same seed sampled different tokens"


def assert_trainer_resumes_exactly(trainer, build: Callable[[], Any], steps: int = 6, seed: int = 0) -> None:
    """A trainer that uses a corpus, stopped half-way and resumed from its saved
    state, ends with exactly the weights of an uninterrupted run (and two
    uninterrupted runs agree)."""
    network = build()
    vocab, window = _vocab_size(network), network.context_length
    tokens = torch.randint(0, vocab, (4000,), generator=torch.Generator().manual_seed(seed))
    corpus = Corpus(tokens[:3600], tokens[3600:])
    recipe = Recipe(
        kind="check", steps=steps, batch_size=4, seed=seed, eval_every=steps, eval_windows=4, learning_rate=1e-2
    )

    def run(resume=None, on_checkpoint=None, every=0):
        torch.manual_seed(seed)
        net = build()
        job = TrainingJob(
            recipe=recipe,
            corpus=corpus,
            context_length=window,
            resume_from=resume,
            checkpoint_every=every,
            on_checkpoint=on_checkpoint,
        )
        trainer.run(net, job)
        return {name: t.detach().clone() for name, t in net.state_dict().items()}

    whole, again = run(), run()
    assert all(torch.equal(whole[n], again[n]) for n in whole), "two runs from the same seed trained different weights"
    saved = []

    def keep(state):  # the state's tensors are live: copy what later steps would change

        saved.append(copy.deepcopy(state))

    run(on_checkpoint=keep, every=steps // 2)
    assert saved, f"the trainer called on_checkpoint never (checkpoint_every={steps // 2}); it cannot be resumed"
    resumed = run(resume=saved[0])
    differing = [n for n in whole if not torch.equal(whole[n], resumed[n])]
    assert not differing, f"resuming at step {saved[0].step} ended with different weights ({', '.join(differing[:3])})"


# -- building things to check ----------------------------------------------------------


def tiny_transformer_builder(plugins: PluginSet | None = None, **config: Any) -> Callable[[], Any]:
    """A builder of a tiny network of the architecture that hosts position encodings
    and blocks (register_models' ``hosts=``: the built-in transformer), with
    ``config`` overriding its parts (``positions="my-encoding"``, ``block="my-block"``)."""
    plugins = plugins or get_plugins()
    return lambda: _build_tiny(plugins, _host(plugins, "positions", "blocks")[0], config)


def _hosted(plugins: PluginSet, kind: str, name: str) -> Callable[[], Any]:
    """A builder of a tiny network of the architecture hosting ``kind``, with ``name`` as its part."""

    def build():
        host, hosts = _host(plugins, kind)
        return _build_tiny(plugins, host, {hosts[kind]: name})

    return build


def _host(plugins: PluginSet, *kinds: str) -> tuple[str, dict[str, str]]:
    """The architecture that builds registered components of ``kinds`` by name, and
    which of its settings names each kind (register_models' ``hosts=``)."""
    models = plugins.components["models"]
    for name in models.declaring("hosts"):
        hosts = models.declared(name, "hosts")
        if all(kind in hosts for kind in kinds):
            return name, hosts
    raise ZooError(f"no registered architecture hosts {' and '.join(kinds)} (register_models' hosts=)")


def _build_tiny(plugins: PluginSet, architecture: str, config: dict[str, Any]) -> Any:
    models = plugins.components["models"]
    return models.create(
        architecture, {**TINY, **(models.declared(architecture, "tiny") or {}), **config}, plugins.components
    )


def _outcome(subject: str, check: str, action: Callable[[], object]) -> CheckResult:
    # ``action`` runs here and now, so a lambda may use a loop's variables as they are.
    try:
        action()
    except AssertionError as exc:
        return CheckResult(subject, check, "FAIL", str(exc).splitlines()[0] if str(exc) else "assertion failed")
    except ZooError as exc:
        return CheckResult(subject, check, "FAIL", str(exc))
    except Exception as exc:  # a plugin's bug must be reported, not crash the kit
        return CheckResult(subject, check, "FAIL", f"{type(exc).__name__}: {exc}")
    return CheckResult(subject, check, "ok")


def check_context(subject: str, network) -> list[CheckResult]:
    """The checks of a network's own kind of context: for a window (bounded), the
    KV cache against uncached sampling; for a carried state (unbounded), chunked
    ``step`` against one call, a state that does not grow, and sampling past the
    training window one token per step."""
    if context_kind(network) == UNBOUNDED:
        return [
            _outcome(
                subject,
                "step() in chunks, state carried, equals one call",
                lambda: assert_chunked_step_matches_whole(network),
            ),
            _outcome(subject, "the state does not grow with the text", lambda: assert_state_does_not_grow(network)),
            _outcome(
                subject,
                "samples past its training window, one token per step",
                lambda: assert_samples_past_window_in_constant_work(network),
            ),
        ]
    if implements(network, CachedDecoding):
        return [
            _outcome(
                subject,
                "KV cache equals uncached past the window, and is used",
                lambda: assert_kv_cache_matches_uncached(network),
            )
        ]
    why = (
        "its cached decoding is incomplete"
        if capability_problem(network, CachedDecoding)
        else "supports_kv_cache is false"
    )
    return [CheckResult(subject, "KV cache", "skip", f"{why}: sampled uncached")]


def check_network(subject: str, build: Callable[[], Any]) -> list[CheckResult]:
    """Every model check on a buildable network: protocol and capabilities
    (``check_model_protocols``), causality, its kind of context (``check_context``),
    round trip, determinism."""
    results = [check_model_protocols(subject, build)]
    if not results[0].passed:
        return results
    network = build()
    results.append(_outcome(subject, "causality", lambda: assert_causal(network)))
    results += check_context(subject, network)
    results.append(_outcome(subject, "checkpoint round trip", lambda: assert_checkpoint_round_trip(build)))
    results.append(_outcome(subject, "determinism", lambda: assert_deterministic(build)))
    return results


# Text in many scripts, emoji included (a ZWJ sequence, a flag, a skin tone):
# what a tokenizer meets once a user's own text is trained on or sampled from.
ROUND_TRIP_TEXTS = {
    "English": "ROMEO: But, soft! what light through yonder window breaks?",
    "accented Latin": "Grüße aus Köln; façade, naïve café, smörgåsbord, Łódź",
    "Greek": "Ἐν ἀρχῇ ἦν ὁ λόγος",
    "Cyrillic": "Съешь же ещё этих мягких французских булок",
    "Arabic": "مرحبا بالعالم",
    "Hindi": "नमस्ते दुनिया",
    "Chinese": "你好，世界。",
    "Japanese": "こんにちは、世界！",
    "emoji": "🦊🐍✨ 👩‍💻 🇫🇷 👍🏽",
    "control and spacing": "tab\there\r\nnew line  two spaces\u00a0nbsp",
}


def assert_tokenizer_round_trips(tokenizer, texts: dict[str, str] | None = None) -> dict[str, str]:
    """``decode(encode(text)) == text`` for text in many scripts and emoji, and
    every id ``encode`` gives is below ``vocab_size``. A text the tokenizer
    cannot represent must be refused with a ``ZooError`` saying so (never
    silently changed); returns those refusals, by what was refused."""
    refused: dict[str, str] = {}
    for label, text in (texts or ROUND_TRIP_TEXTS).items():
        try:
            ids = list(tokenizer.encode(text))
        except ZooError as exc:
            refused[label] = str(exc)
            continue
        outside = [i for i in ids if not 0 <= int(i) < tokenizer.vocab_size]
        assert not outside, (
            f"{label} text: encode gave ids outside the vocabulary of {tokenizer.vocab_size}: {outside[:3]}"
        )
        back = tokenizer.decode(ids)
        assert back == text, (
            f"{label} text {text[:24]!r} decodes as {back[:24]!r}: a tokenizer that cannot represent text must "
            f"raise ZooError saying so"
        )
    return refused


def _tokenizer_spec(name: str):
    """A tokenizer section for a tokenizer no variant uses: its kind alone (no file)."""
    return SimpleNamespace(kind=name, vocab_size=None, file=None, sha256=None)


def _check_tokenizer(plugins: PluginSet, name: str, users: list) -> list[CheckResult]:
    subject = f"tokenizer '{name}'"
    made: dict[str, Any] = {}

    def make():
        if users:
            made["tokenizer"] = load_tokenizer(users[0], plugins)
        else:
            made["tokenizer"] = plugins.components["tokenizers"].create(name, _tokenizer_spec(name), None)
        assert_conforms("tokenizers", made["tokenizer"])

    how = f"as variant '{users[0].name}' names it" if users else "from its kind alone (no variant uses it)"
    outcome = _outcome(subject, f"builds {how} and satisfies the protocol", make)
    if not outcome.passed and not users:  # it may need a file only a card can name
        return [
            CheckResult(
                subject, "round trip", "skip", f"no variant uses it, and it needs one to build: {outcome.detail}"
            )
        ]
    results = [outcome]
    if outcome.passed:
        refusals: dict[str, str] = {}
        results.append(
            _outcome(
                subject,
                f"round-trips text in {len(ROUND_TRIP_TEXTS)} scripts and emoji",
                lambda: refusals.update(assert_tokenizer_round_trips(made["tokenizer"])),
            )
        )
        if refusals:
            first = next(iter(refusals.values()))
            results[-1].detail = f"refuses {', '.join(refusals)} through ZooError (first: {first})"
    return results


def _check_dataset(plugins: PluginSet, name: str) -> CheckResult:
    def readable_checksummed_splittable():
        dataset = plugins.datasets.get(name)
        text = read_dataset(dataset)  # reads it and checks its sha256
        assert 0 < dataset.train_fraction < 1, f"train_fraction {dataset.train_fraction} leaves no validation text"
        train, validation = split_text(text.text, dataset.train_fraction)
        assert train and validation, f"splitting at {dataset.train_fraction} leaves a split empty"

    return _outcome(
        f"dataset '{name}'",
        "readable, matches its sha256, splits into train and validation",
        readable_checksummed_splittable,
    )


def _check_adapter(plugins: PluginSet, name: str, users: list) -> list[CheckResult]:
    subject = f"adapter '{name}'"
    config = dict(users[0].card.adapter.config or {}) if users else {}
    made: dict[str, Any] = {}

    def make():
        made["adapter"] = plugins.components["adapters"].create(name, config)

    how = f"with variant '{users[0].name}''s settings" if users else "with no settings"
    outcome = _outcome(subject, f"builds {how} and satisfies the protocol", make)
    if not outcome.passed and not users:
        return [CheckResult(subject, "applies", "skip", f"needs settings no variant gives it: {outcome.detail}")]
    results = [outcome]
    if outcome.passed:
        results.append(
            _outcome(
                subject,
                "applied on the fly and merged, the same logits",
                lambda: assert_adapter_merges_exactly(made["adapter"], tiny_transformer_builder(plugins)),
            )
        )
    return results


@torch.no_grad()
def assert_adapter_merges_exactly(adapter, build: Callable[[], Any], seed: int = 0) -> None:
    """Tensors of the shapes the adapter declares, applied on the fly and merged
    into the weights, give the same logits: both are the adapted model."""
    torch.manual_seed(seed)
    base = build().eval()
    shapes = adapter.tensor_shapes(base)
    assert shapes, "tensor_shapes names no tensor: an adapter variant's file would be empty"
    generator = torch.Generator().manual_seed(seed)
    tensors = {n: 0.02 * torch.randn(tuple(shape), generator=generator) for n, shape in shapes.items()}
    state = base.state_dict()
    logits = []
    for merge in (False, True):
        network = build().eval()
        network.load_state_dict(state)
        adapter.apply(network, {n: t.clone() for n, t in tensors.items()}, merge=merge)
        logits.append(network(_random_ids(network, min(4, network.context_length), seed))[0])
    gap = (logits[0] - logits[1]).abs().max().item()
    assert gap <= 1e-4, f"the adapter applied on the fly and merged give logits {gap:.3g} apart"


def _check_model(plugins: PluginSet, name: str, users: list, deep: bool = True) -> list[CheckResult]:
    """An architecture built and run: from the smallest card using it (by its
    recorded parameters; an untrained card's size is unknown, so it comes last),
    else from the kit's tiny config. ``deep=False``: built and conforming only."""

    def checks(subject: str, build: Callable[[], Any]) -> list[CheckResult]:
        if deep:
            return check_network(subject, build)
        return [check_model_protocols(subject, build)]

    subject = f"model '{name}'"
    if users:
        smallest = min(users, key=lambda v: math.inf if v.card.parameters is None else v.card.parameters)
        return checks(f"{subject} as variant '{smallest.name}' builds it", lambda: build_network(smallest, plugins))
    config = {**TINY, **(plugins.components["models"].declared(name, "tiny") or {})}

    def build():
        return plugins.components["models"].create(name, dict(config), plugins.components)

    outcome = _outcome(subject, "builds from the kit's tiny config", build)
    if not outcome.passed:
        return [
            CheckResult(
                subject,
                "builds",
                "skip",
                f"no variant uses it, and the kit's tiny config {config} does not build it: {outcome.detail}; "
                f"register a variant so the kit can build it",
            )
        ]
    return checks(f"{subject} with the kit's tiny config", build)


def _check_trainer(plugins: PluginSet, name: str, deep: bool) -> list[CheckResult]:
    subject = f"trainer '{name}'"
    outcome = _outcome(subject, "satisfies the protocol", lambda: plugins.components["trainers"].create(name))
    results = [outcome]
    if not deep or not outcome.passed:
        return results
    trainer = plugins.components["trainers"].create(name)
    if trainer.uses_corpus:
        results.append(
            _outcome(
                subject,
                "deterministic, and resumes exactly",
                lambda: assert_trainer_resumes_exactly(trainer, tiny_transformer_builder(plugins)),
            )
        )
    else:
        results.append(
            CheckResult(subject, "resumes exactly", "skip", "uses no corpus: it sets weights, nothing to resume")
        )
    return results


def _check_variant(plugins: PluginSet, variant, deep: bool) -> list[CheckResult]:
    subject = f"variant '{variant.name}'"
    if not has_published_weights(variant):
        return [
            _outcome(subject, "builds from its card", lambda: build_network(variant, plugins)),
            CheckResult(subject, "loads with verified weights", "skip", f"no weights yet: {train_command(variant)}"),
        ]
    loaded = {}

    def load_it():
        loaded["model"] = load_variant(variant, plugins)

    outcome = _outcome(subject, "loads with verified weights", load_it)
    results = [outcome]
    if deep and outcome.passed and "model" in loaded:
        network = loaded["model"].network
        if network.context_length >= 2 and not implements(network, TaskModel):
            results.append(_outcome(subject, "causality", lambda: assert_causal(network)))
            results += [r for r in check_context(subject, network) if r.status != "skip"]
        results.append(_outcome(subject, "samples deterministically", lambda: _assert_samples(loaded["model"])))
    return results


def check_plugin(name: str, deep: bool = True, plugins: PluginSet | None = None) -> list[CheckResult]:
    """Run the kit on everything plugin ``name`` registers (``deep=False``:
    conformance only). Every registered name gets at least one line: checked,
    or skipped with the reason; one the kit has no check for is a failure."""
    plugins = plugins or get_plugins()
    if name not in plugins.plugins:
        raise ZooError(f"no plugin named '{name}' is loaded (loaded: {', '.join(plugins.plugins)})")
    info = plugins.plugins[name]
    everything = list(catalogue(plugins))  # first: it reports broken registry files
    variants = [v for v in everything if v.plugin == name]
    results = [CheckResult(f"plugin '{name}'", "loads without errors", "FAIL", error) for error in info.errors]
    results = results or [CheckResult(f"plugin '{name}'", "loads without errors", "ok")]
    registered = info.registered
    for position in registered.get("positions", []):
        subject = f"position '{position}'"
        build = _hosted(plugins, "positions", position)
        results.append(
            _outcome(
                subject,
                "satisfies the protocol",
                lambda: assert_conforms(
                    "positions",
                    plugins.components["positions"].create(
                        position, d_model=TINY["d_model"], n_head=TINY["n_head"], context_length=TINY["context_length"]
                    ),
                ),
            )
        )
        if deep:
            results += check_network(f"{subject} in a tiny transformer", build)
    for block in registered.get("blocks", []):
        subject = f"block '{block}'"
        results.append(
            _outcome(
                subject,
                "satisfies the protocol",
                lambda: assert_conforms(
                    "blocks",
                    plugins.components["blocks"].create(
                        block, d_model=TINY["d_model"], n_head=TINY["n_head"], d_ff=32, dropout=0.0, norm="layernorm"
                    ),
                ),
            )
        )
        if deep:
            results += check_network(f"{subject} in a tiny transformer", _hosted(plugins, "blocks", block))
    for model_name in registered.get("models", []):
        users = [v for v in everything if v.card.architecture == model_name and v.card.adapter is None]
        results += _check_model(plugins, model_name, users, deep)
    for trainer_name in registered.get("trainers", []):
        results += _check_trainer(plugins, trainer_name, deep)
    for adapter_name in registered.get("adapters", []):
        users = [v for v in everything if v.card.adapter is not None and v.card.adapter.kind == adapter_name]
        results += _check_adapter(plugins, adapter_name, users)
    for tokenizer_name in registered.get("tokenizers", []):
        users = [v for v in everything if v.card.tokenizer.kind == tokenizer_name]
        results += _check_tokenizer(plugins, tokenizer_name, users)
    for dataset_name in registered.get("datasets", []):
        results.append(_check_dataset(plugins, dataset_name))
    for variant in variants:
        results += _check_variant(plugins, variant, deep)
    return results + _unchecked(registered, results)


# The kinds a plugin registers, as they are named in PluginInfo.registered, and
# how the kit names their subjects; "variant files" are checked variant by variant.
_SUBJECTS = {
    "tokenizers": "tokenizer",
    "positions": "position",
    "blocks": "block",
    "models": "model",
    "trainers": "trainer",
    "adapters": "adapter",
    "datasets": "dataset",
}


def _unchecked(registered: dict[str, list[str]], results: list[CheckResult]) -> list[CheckResult]:
    """A failure for each registered name no line speaks of: nothing a plugin
    registers may pass unchecked and unexplained."""
    said = {result.subject.split(" as ")[0].split(" with ")[0].split(" in a ")[0] for result in results}
    missing = []
    for kind, names in registered.items():
        if kind == "variant files":
            continue
        for registered_name in names:
            subject = f"{_SUBJECTS.get(kind, kind)} '{registered_name}'"
            if subject not in said:
                missing.append(
                    CheckResult(subject, "checked", "FAIL", f"the kit has no check for {kind}: nothing was checked")
                )
    return missing


def _assert_samples(model) -> None:
    if implements(model.network, TaskModel):  # task models answer rather than continue
        return
    prompt = model.tokenizer.decode(model.tokenizer.encode("The ")) or "a"
    first = model.generate(prompt, max_new_tokens=8, seed=3)
    assert first == model.generate(prompt, max_new_tokens=8, seed=3), "the same seed sampled different text"
    assert len(first) > len(prompt), "sampling added nothing to the prompt"
