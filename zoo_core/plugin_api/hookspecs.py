"""The plugin author's reference: every hook the zoo calls.

A plugin is a module (or object) with functions decorated by `zoo_core.hookimpl`
whose names match the specifications below, exposed through an entry point in
the group ``zoo``::

    [project.entry-points.zoo]
    rope = "zoo_rope"

Every hook receives a ``register`` callable and returns nothing. Factories may be
given as callables or as ``"package.module:attribute"`` strings; strings are only
imported when a variant needs them, which keeps ``zoo list`` free of torch.
Names are global per component kind: if two third-party plugins register the
same name, the zoo refuses to use it and names both plugins; a name a built-in
plugin registers cannot be taken by a third party (its registration is refused
and reported against it). What a factory returns is checked against its
protocol in ``zoo_core.plugin_api.protocols`` when it is created.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("zoo")


@hookspec
def register_tokenizers(register):
    """Register tokenizers: ``register(name, factory)``.

    ``factory(spec, path)`` receives the card's tokenizer section and the resolved
    path of ``spec.file`` (or None) and returns an object satisfying
    ``zoo_core.plugin_api.protocols.Tokenizer``: ``encode(text) -> list[int]``,
    ``decode(ids) -> str`` and ``vocab_size``. ``spec`` is read-only and read by
    attribute only: ``spec.kind``, ``spec.vocab_size``, ``spec.file``,
    ``spec.sha256`` (see ``zoo_core.plugin_api.protocols.TokenizerSpecView``).

    A tokenizer that can be trained (`zoo train-tokenizer --kind NAME`) also
    passes ``train=``, a callable or ``"module:attribute"``:
    ``train(text, vocab_size=..., train_fraction=...)`` returns a
    ``zoo_core.corpus.tokenizer_training.TrainedTokenizer``.
    """


@hookspec
def register_positions(register):
    """Register position encodings: ``register(name, factory)``.

    ``factory(d_model=..., n_head=..., context_length=...)`` returns an
    ``nn.Module`` satisfying ``zoo_core.plugin_api.protocols.PositionEncoding``. An encoding
    may add to the residual stream (``embed``), rotate queries and keys inside
    attention (``rotate``, as RoPE does) or bias attention scores (``bias``, as
    ALiBi does); subclass ``zoo_core.plugin_api.components.PositionEncodingBase`` and
    override only what yours does.
    """


@hookspec
def register_blocks(register):
    """Register transformer blocks: ``register(name, factory)``.

    ``factory(d_model=..., n_head=..., d_ff=..., dropout=..., norm=...)`` returns
    an ``nn.Module`` satisfying ``zoo_core.plugin_api.protocols.Block``:
    ``block(x, positions, encoding, need_weights=False, cache=None) -> (x, weights | None)``,
    where ``weights`` has shape (batch, heads, queries, keys). The transformer
    passes ``cache`` (the layer's cache while decoding, else None): accept it and
    hand it, with ``positions``, to the attention (the protocol's contract).
    A layout setting a card sets (``mlp``, ``n_kv_head``, ...; docs/cards.md) is
    passed by keyword only when set, and only to a factory that names it. Each
    layer is built by its own call, with its own layer's settings (a card's
    ``layers`` groups may differ layer by layer), and its forward is handed its
    own layer's position encoding as ``encoding``.
    """


@hookspec
def register_models(register):
    """Register architectures: ``register(name, factory)``.

    ``factory(config, components)`` receives the card's architecture config
    (its ``config`` table plus ``context_length`` and ``vocab_size``) and
    ``components``, a dict from kind ('positions', 'blocks', ...) to
    ``zoo_core.plugin_api.manager.Components``, to build registered parts by name
    (``components["blocks"].create("pre-norm", d_model=...)``); it returns an
    ``nn.Module`` satisfying ``zoo_core.plugin_api.protocols.LanguageModel``.
    A model that carries a state forward instead of seeing a window (a
    recurrent network) says ``context_kind = "unbounded"`` and implements
    ``step(idx, state) -> (logits, state)``; the zoo then samples and scores it
    with the state carried.

    ``register(name, factory, config="module:Model")`` also names the
    architecture's config model: a pydantic model (``extra="forbid"``), imported
    lazily like the factory and importing nothing heavier than pydantic, since
    cards are validated where torch is never imported. Every card of the
    architecture is validated with it: the architecture config (the ``config``
    table plus ``context_length`` and ``vocab_size``) is handed to
    ``Model.model_validate`` when the card is read, and its first problem is the
    card's one-line error, naming the key (a validator that raises a ValueError
    with a ``field`` attribute names that key). The card keeps the table as
    written: no defaults are filled in. Optional, on the model:
    ``renamed_settings`` (a dict, old key -> current key: an older card's key is
    read, and stored, under its current name); ``estimate_sizes(config)`` (a
    classmethod: (parameters, activation values of one window) from a config's
    sizes, or None when it is not shaped for it; the budget check's estimate,
    zoo_core.catalogue.limits); and ``reference_notes`` (Markdown). docs/cards.md
    describes the architecture from the model: its docstring (first line the
    heading), each field's default and description, and the notes.

    ``register(name, factory, listed={...})`` says what `zoo list` shows in its
    ``layers``, ``positions`` and ``norm`` columns for a card of this
    architecture: each column maps to the config setting shown there (``"layers":
    "n_layer"``) or to a function of the card's config table returning what to
    show. It is read without importing the factory, so give it as a dict whose
    functions import neither torch nor pydantic; a column it leaves out, or
    whose value is missing or None, shows ``-``.

    An architecture that builds registered position encodings and blocks by the
    names in its config passes ``hosts=``, a dict from the component kind to the
    setting that names it (``{"positions": "positions", "blocks": "block"}``),
    and ``tiny=``, the settings that make a tiny network beside the testing
    kit's ``TINY`` (``vocab_size``, ``context_length``, ``d_model``, ``n_head``):
    `zoo check-plugin` and ``zoo_core.kit.testing.tiny_transformer_builder``
    check a third party's encoding or block inside it (a built-in host first).
    """


@hookspec
def register_families(register):
    """Register model families: ``register(name, record)``.

    A family record is everything the zoo knows of one family of published
    models (Llama, Qwen2, GPT-2, ...), in one place: the Hugging Face
    ``model_type``s it imports and how their config fields become a card's
    config and back, its GGUF architecture and metadata keys, its tensors keyed
    on llama.cpp's canonical names (``gguf.MODEL_TENSOR``), the transforms
    between its layouts and the zoo's, what it refuses, and how TransformerLens
    names its heads. ``record`` (an object or ``"module:attribute"``, imported
    only when a converter needs it) satisfies
    ``zoo_core.plugin_api.families.FamilyRecord``; the converters (`zoo import
    hf|gguf`, `zoo export --format hf|gguf|transformer-lens`) read nothing
    else. An imported card records its family's name in ``family``.
    docs/plugins.md, "Adding a family", has a worked example.
    """


@hookspec
def register_trainers(register):
    """Register trainers: ``register(name, factory)``.

    A card's ``recipe.kind`` names the trainer `zoo train` uses (``trained`` is
    the standard AdamW/SGD trainer, ``hand-built`` sets the puzzle's weights).
    ``factory()`` returns an object satisfying ``zoo_core.plugin_api.protocols.Trainer``:
    ``uses_corpus`` and ``run(network, job) -> TrainingResult``, where ``job`` is
    the run's ``zoo_core.training.TrainingJob`` (frozen, everything the run needs). Subclass
    ``zoo_core.training.StandardTrainer`` and override ``make_optimizer`` to
    train with another optimizer and keep seeding, evaluation and resumable state.

    Two optional methods let a trainer change what is trained and written (the
    built-in ``lora`` trainer uses both): ``prepare_network(network, job)``,
    called once the network is built and loaded and before a saved state is read
    into it, returns the network to train (e.g. with adapters added and the rest
    frozen); ``saved_weights(network, card)`` returns the tensors to write and
    the card that describes them (default: the whole state dict, the card as is).
    Settings of a trainer's own go in ``recipe.options``; a trainer subclassing
    the standard one checks them in ``check_options(recipe)``.
    """


@hookspec
def register_adapters(register):
    """Register adapters: ``register(name, factory)``.

    A card with an ``adapter`` section (an adapter variant: its checkpoint holds
    only the adapter's tensors) names the adapter in ``adapter.kind``; loading
    builds the base variant's network, loads and verifies the base's weights, and
    hands them to the adapter. ``factory(config)`` receives the card's
    ``adapter.config`` (refuse a bad one with a one-line ``ZooError``) and returns
    an object satisfying ``zoo_core.plugin_api.protocols.Adapter``:
    ``tensor_shapes(network)``, the names and shapes of the tensors the adapter
    file must hold for that network, and ``apply(network, tensors, merge=False)``,
    which changes the network in place (on the fly, or folded into its weights
    with ``merge=True``). The built-in ``lora`` plugin registers ``lora``.
    """


@hookspec
def register_variants(register):
    """Contribute variants: ``register(path)`` with the path of a registry TOML file.

    Each table of that file is one variant's card (see ``zoo show`` for the
    fields); checkpoint and tokenizer paths are relative to the file, so a plugin
    package ships its registry and safetensors files side by side.
    """


@hookspec
def register_datasets(register):
    """Contribute datasets: ``register(name, path, sha256=..., train_fraction=0.9, description="")``.

    ``path`` is a UTF-8 text file the plugin ships (locate it from your
    package's ``__file__`` so it works installed); ``sha256`` is its checksum,
    checked every time the text is read; ``train_fraction`` is the split rule:
    the first share of the characters trains, the rest validates. A recipe then
    names the dataset (``data = "tinyshakespeare"``) instead of a path, and
    `zoo datasets` lists it. Names are global, like component names.
    """
