"""Model cards: what a variant is, how it was made and how well it does.

A card is validated from one `registry.toml` table and written, as JSON, into the
header of the variant's safetensors file, so a checkpoint describes itself.
Unknown fields are errors everywhere: a typo must not silently become a default.

Fields marked ``WEIGHTS`` (``json_schema_extra``) define the weights: change one
and the checkpoint no longer matches its card. The others describe or measure.
`zoo card-schema` prints the JSON Schema and `docs/cards.md` is generated from
these models (`zoo_core.catalogue.card_docs`).

Validated cards are cached (`zoo_core.catalogue.card_cache`): a change to what a
card validates to, or to ``index_entry``, must bump ``CARD_SCHEMA_VERSION`` there.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonDict

from ..errors import ZooError
from ..plugin_api.manager import get_plugins
from .evaluation_text import EVALUATION_DATASET, EVALUATION_TRAIN_FRACTION
from .limits import ShapeError

WEIGHTS: JsonDict = {"defines_weights": True}  # json_schema_extra of a field the weights depend on
NAME_PATTERN = r"^[a-z0-9][a-z0-9.\-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class TokenizerSpec(_Strict):
    """Which registered tokenizer encodes this variant's text, and its data file."""

    kind: str = Field(
        description="registered tokenizer name, e.g. 'bpe' (`zoo plugins` lists them)", json_schema_extra=WEIGHTS
    )
    vocab_size: int = Field(
        gt=0,
        strict=True,
        description="number of token ids; the embedding and output layers' size",
        json_schema_extra=WEIGHTS,
    )
    file: str | None = Field(
        None, description="the tokenizer's data file (BPE ranks, character list), relative to the registry file"
    )
    sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="of the tokenizer's file; checked on every load"
    )
    bos_id: int | None = Field(
        None,
        ge=0,
        strict=True,
        description="the beginning-of-sequence token put before a prompt, or a text scored from its start, "
        "unless it already starts with it: the tokenizer's own 'add BOS' setting, recorded at import "
        "(GGUF tokenizer.ggml.add_bos_token, a tokenizer.json's post-processor); none: text is read as given",
    )

    @model_validator(mode="after")
    def _bos_in_vocabulary(self) -> "TokenizerSpec":
        if self.bos_id is not None and self.bos_id >= self.vocab_size:
            raise ValueError(f"bos_id {self.bos_id} is outside the vocabulary (0..{self.vocab_size - 1})")
        return self


class Recipe(_Strict):
    """How the weights came to be: a training run, or set by hand."""

    kind: str = Field(
        "trained",
        pattern=NAME_PATTERN,
        description="the registered trainer `zoo train` uses: 'trained' (the standard AdamW/SGD trainer), "
        "'hand-built' (the puzzle's hand-set weights) or a plugin's trainer",
        json_schema_extra=WEIGHTS,
    )
    optimizer: Literal["adamw", "sgd", "muon"] = Field(
        "adamw",
        description="the standard trainer's optimizer; 'muon': Muon for the hidden matrices (every linear weight "
        "but the vocabulary head), AdamW for the rest, as the nanoGPT speedrun does",
        json_schema_extra=WEIGHTS,
    )
    muon_learning_rate: float | None = Field(
        None,
        gt=0,
        description="optimizer 'muon': the matrices' peak learning rate (default 0.02); the schedule scales it "
        "as it scales learning_rate, which is AdamW's",
        json_schema_extra=WEIGHTS,
    )
    learning_rate: float = Field(1e-3, gt=0, description="peak learning rate", json_schema_extra=WEIGHTS)
    weight_decay: float = Field(
        0.0, ge=0, description="decoupled weight decay (AdamW) or L2 penalty (SGD)", json_schema_extra=WEIGHTS
    )
    beta1: float = Field(0.9, ge=0, lt=1, description="first-moment decay (AdamW, Lion)", json_schema_extra=WEIGHTS)
    beta2: float = Field(0.999, ge=0, lt=1, description="second-moment decay (AdamW, Lion)", json_schema_extra=WEIGHTS)
    grad_clip: float | None = Field(
        None, gt=0, description="clip the gradient norm to this value", json_schema_extra=WEIGHTS
    )
    lr_schedule: Literal["constant", "cosine", "wsd"] = Field(
        "constant",
        description="constant; 'cosine': linear warm-up then cosine decay; 'wsd': linear warm-up, a flat "
        "stretch, then a linear cool-down over the last cooldown_fraction of the steps",
        json_schema_extra=WEIGHTS,
    )
    warmup_steps: int = Field(
        0, ge=0, description="warm-up steps of the cosine or wsd schedule", json_schema_extra=WEIGHTS
    )
    min_learning_rate: float = Field(
        0.0, ge=0, description="where the cosine or wsd schedule ends", json_schema_extra=WEIGHTS
    )
    cooldown_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="'wsd' schedule: the share of the steps over which the rate falls to min_learning_rate "
        "(default 0.2)",
        json_schema_extra=WEIGHTS,
    )
    steps: int = Field(1, gt=0, description="optimizer updates", json_schema_extra=WEIGHTS)
    batch_size: int = Field(32, gt=0, description="windows per update", json_schema_extra=WEIGHTS)
    context: int | None = Field(
        None,
        gt=0,
        description="tokens per training window, at most the card's context_length (default: context_length); "
        "fewer to fine-tune a model of a long context on a CPU or on a short text",
        json_schema_extra=WEIGHTS,
    )
    seed: int = Field(
        42,
        ge=-(2**63),
        lt=2**64,
        strict=True,
        description="fixes initialisation, dropout and the order of batches; any 64-bit integer, distinct seeds give distinct streams",
        json_schema_extra=WEIGHTS,
    )
    eval_every: int = Field(500, gt=0, description="steps between evaluations (and, by default, saved training states)")
    eval_windows: int = Field(320, gt=0, description="fixed windows per split for train/val loss")
    data: str = Field(
        "tinyshakespeare",
        description="a registered dataset's name (`zoo datasets`), or a text file's path relative to the registry",
    )
    data_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="sha256 of the text trained on; checked whenever the text is read"
    )
    train_fraction: float = Field(
        0.9,
        gt=0,
        lt=1,
        description="the corpus's leading share trained on; the rest is validation",
        json_schema_extra=WEIGHTS,
    )
    base: str | None = Field(
        None,
        pattern=NAME_PATTERN,
        description="fine-tuned: the variant whose weights the run started from (none: fresh weights)",
        json_schema_extra=WEIGHTS,
    )
    base_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="the base's checkpoint sha256", json_schema_extra=WEIGHTS
    )
    skip_unknown: bool | None = Field(
        None,
        description="characters of the text that the tokenizer has no token for were dropped before training "
        "(and are dropped when it is scored)",
        json_schema_extra=WEIGHTS,
    )
    keep: Literal["last", "best"] | None = Field(
        None,
        description="which weights a run ends with: the last step's (the default) or those of the evaluation "
        "with the lowest validation loss",
        json_schema_extra=WEIGHTS,
    )
    patience: int | None = Field(
        None,
        gt=0,
        description="stop early after this many evaluations without a lower validation loss",
        json_schema_extra=WEIGHTS,
    )
    options: dict[str, Any] | None = Field(
        None,
        description="the trainer's own settings (for 'lora': rank, alpha, targets, dropout), checked by the trainer; "
        "`--set options.KEY=VALUE` sets one",
        json_schema_extra=WEIGHTS,
    )
    notes: str = Field("", description="free text about how the weights were made")

    @model_validator(mode="after")
    def _settings_that_apply(self):
        # A setting the run would ignore, recorded in a card, claims something that never applied.
        if self.muon_learning_rate is not None and self.optimizer != "muon":
            raise ValueError(f"muon_learning_rate applies to optimizer 'muon', not '{self.optimizer}'")
        if self.cooldown_fraction is not None and self.lr_schedule != "wsd":
            raise ValueError(f"cooldown_fraction applies to lr_schedule 'wsd', not '{self.lr_schedule}'")
        return self

    @model_serializer(mode="wrap")
    def _only_what_applies(self, handler):
        # Hand-set weights have no optimizer, steps or data: writing the defaults
        # out would describe a training run that never happened.
        data = handler(self)
        if self.kind == "hand-built":
            return {key: data[key] for key in ("kind", "notes")}
        return data


class AdapterSpec(_Strict):
    """An adapter variant: its checkpoint holds only the adapter, applied to a base variant's verified weights."""

    kind: str = Field(
        pattern=NAME_PATTERN,
        description="the registered adapter that applies the file, e.g. 'lora' (`zoo plugins` lists them)",
        json_schema_extra=WEIGHTS,
    )
    base: str = Field(
        pattern=NAME_PATTERN,
        description="the variant whose weights the adapter applies to, looked up in the catalogue by name",
        json_schema_extra=WEIGHTS,
    )
    base_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="the base's checkpoint sha256 the adapter was trained on; loading refuses any other",
        json_schema_extra=WEIGHTS,
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="the adapter's settings, read by the registered adapter (for 'lora': rank, alpha, targets)",
        json_schema_extra=WEIGHTS,
    )


class Metrics(_Strict):
    """Measured, never claimed: filled in by `zoo train` (or `zoo eval`)."""

    train_loss: float | None = Field(
        None, description="mean loss on the recipe's fixed training windows", json_schema_extra=WEIGHTS
    )
    validation_loss: float | None = Field(
        None, description="mean loss on the fixed validation windows", json_schema_extra=WEIGHTS
    )
    validation_perplexity: float | None = Field(None, description="exp(validation_loss)", json_schema_extra=WEIGHTS)
    uniform_loss: float | None = Field(
        None, description="ln(vocabulary size): what guessing uniformly scores", json_schema_extra=WEIGHTS
    )
    loss_unit: str = Field("nats per token", description="the unit of the losses", json_schema_extra=WEIGHTS)
    # Measured later by `zoo eval --record` and kept in the registry only: not
    # part of what a checkpoint's header is compared on.
    validation_bits_per_byte: float | None = Field(
        None,
        description="bits per UTF-8 byte of the whole validation text: compares across tokenizers (zoo_core.evaluation.bits)",
    )
    validation_bits_per_character: float | None = Field(None, description="the same, in bits per character")
    # Measured by `zoo import gguf` on a fixed English paragraph (zoo_core.interop.gguf_import's
    # REFERENCE_PARAGRAPH): an imported model has no validation split of its own.
    paragraph_perplexity: float | None = Field(
        None, description="perplexity per token on the zoo's fixed English paragraph, measured at import"
    )
    paragraph_bits_per_byte: float | None = Field(
        None, description="the same paragraph's bits per UTF-8 byte: compares across tokenizers"
    )
    training_seconds: float | None = Field(
        None, description="time spent in updates (evaluation excluded)", json_schema_extra=WEIGHTS
    )
    tokens_per_second: float | None = Field(
        None, description="training throughput over the updates", json_schema_extra=WEIGHTS
    )
    stopped_at: int | None = Field(
        None, description="the step an early stop (recipe.patience) ended the run at", json_schema_extra=WEIGHTS
    )
    kept_step: int | None = Field(
        None, description="with recipe.keep = 'best': the step whose weights were kept", json_schema_extra=WEIGHTS
    )
    accuracy: float | None = Field(
        None, description="task models (the puzzle): share of answers right", json_schema_extra=WEIGHTS
    )


class TrainedWith(_Strict):
    """Where a trained variant's weights were made (`zoo train` fills it in):
    the same recipe on another device, dtype, number of processes, torch, thread
    count or CPU gives close but not bit-identical weights (docs/determinism.md)."""

    device: str = Field(description="'cpu', 'mps' or 'cuda (GPU model)'")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(description="autocast dtype of the forward pass")
    world_size: int = Field(1, gt=0, description="data-parallel processes sharing each batch")
    # What else decides the weights' last bits (docs/determinism.md): a retraining that
    # matches all of these reproduces them bit for bit, any other one within a tolerance.
    # None on cards trained before the zoo recorded them.
    torch_version: str | None = Field(None, description="torch's version (its kernels)")
    threads: int | None = Field(None, gt=0, description="torch's intra-op CPU threads (how each sum was split)")
    cpu_capability: str | None = Field(
        None,
        description="the CPU instruction set torch's kernels used (torch.backends.cpu.get_cpu_capability(): "
        "'AVX2', 'AVX512', 'DEFAULT', ...)",
    )
    cpu_flags: str | None = Field(
        None,
        description="a digest of the CPU's feature flags (sha256 of the sorted /proc/cpuinfo flags, 16 hex "
        "digits): the math libraries under torch choose their kernels by them",
    )
    machine: str | None = Field(
        None, description="the processor architecture (platform.machine(): 'x86_64', 'arm64', ...)"
    )


class ImportRecord(_Strict):
    """Where an imported variant's weights came from: trained elsewhere and converted
    by `zoo import`. Its licence, family and parameter count are the card's own fields."""

    format: str = Field(description="what was read, e.g. 'GGUF llama', 'transformers Llama', 'nanoGPT'")
    file: str = Field(description="the source file's name (for a folder, its weights file's)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="the source file's sha256")
    dataset: str | None = Field(
        None,
        description="a dataset registered here that the source names as its training text (a Hub card's "
        "`datasets`): what `zoo eval` scores it on",
    )
    hub_repository: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*/[A-Za-z0-9][A-Za-z0-9._\-]*$",
        description="the Hugging Face repository (ORG/NAME) the weights come from, when the source names it: an "
        "HF export's README gives it as base_model",
    )
    notes: str = Field("", description="what else the import found (tensor types, claims it did not measure)")


class ChatSpec(_Strict):
    """How a conversation becomes the model's prompt: its chat template, as Hugging Face writes one."""

    template: str = Field(
        description="the Jinja chat template, rendered as transformers renders it, given `messages`, "
        "`add_generation_prompt`, `bos_token` and `eos_token`"
    )
    bos_token: str | None = Field(None, description="the text of the beginning-of-sequence token the template names")
    eos_token: str | None = Field(None, description="the text of the end-of-sequence token the template names")
    stop: list[str] = Field(
        default_factory=list, description="texts that end the assistant's turn besides eos_token, e.g. '<|im_end|>'"
    )


class CheckpointRef(_Strict):
    """Where the weights are and their checksum."""

    path: str = Field(description="safetensors file, relative to the registry file")
    sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="the file's sha256, checked on every load; none until trained"
    )


class Origin(_Strict):
    """Where an installed variant came from (`zoo install` fills it in): the
    archive it was unpacked from, checked by its sha256."""

    archive_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the `.zoo` archive installed")
    source: str = Field(description="the archive's file path or URL when it was installed")
    remote: str | None = Field(None, description="the remote catalogue it was pulled from, by name")
    installed: str = Field(description="when it was installed (UTC, ISO 8601)")


class ComponentSource(_Strict):
    """Which installed plugin provided one component the variant uses, when the card was written."""

    name: str = Field(description="the component's registered name, e.g. 'bpe'")
    plugin: str = Field(description="the plugin (entry-point name) that registered it")
    distribution: str = Field(description="the Python distribution that plugin came from, e.g. 'zoo-lm'")
    version: str = Field(description="that distribution's version")


COMPONENT_ROLES = ("model", "tokenizer", "positions", "block", "trainer", "adapter")


def config_model(architecture: str | None) -> type[BaseModel] | None:
    """The pydantic model the architecture's plugin validates its config with
    (``register(name, factory, config=...)``); None when it names none, or the
    architecture is not registered (building it is then refused, naming why)."""
    if architecture is None:
        return None
    model = get_plugins().components["models"].declared(architecture, "config")
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def current_setting_names(config: dict[str, Any], renamed: dict[str, str]) -> dict[str, Any]:
    """``config`` with every renamed setting (``renamed``: old name -> new) under its
    current name: an older card reads, and is stored, as if written with the new one."""
    for old, new in renamed.items():
        if old in config:
            if new in config:
                raise ValueError(f"config sets both {old!r} and {new!r}, which is its current name; keep {new!r}")
            config = {(new if key == old else key): value for key, value in config.items()}
    return config


def _config_problem(error: ValidationError) -> ShapeError:
    """The first problem the architecture's config model found, as one line naming the key."""
    first = error.errors()[0]
    raised = (first.get("ctx") or {}).get("error")
    named = getattr(raised, "field", None)  # a validator's error may name the key it is about
    path = [*first["loc"], *([named] if named else [])]
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    elif isinstance(raised, ValueError):
        message = str(raised)
    else:
        message = first["msg"]
    return ShapeError(".".join(["config", *map(str, path)]), message)


VARIANT_NAME = re.compile(r"[a-z0-9][a-z0-9.\-]*")


class ModelCard(_Strict):
    """Everything the zoo knows about one variant."""

    name: str = Field(
        pattern=NAME_PATTERN, description="the variant's name (the registry table's key)", json_schema_extra=WEIGHTS
    )
    description: str = Field(description="one or two sentences for `zoo list` and `zoo show`")
    architecture: str = Field(description="registered model name (`zoo plugins` lists them)", json_schema_extra=WEIGHTS)
    family: str | None = Field(
        None,
        description="the model family its config and tensors are laid out as (a registered family record, e.g. "
        "'llama'), recorded by `zoo import`; exports write that family. Unset: the first family that takes the "
        "variant",
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra=WEIGHTS,
        description="the architecture's settings, validated by the model its plugin registers (see the "
        "architectures' sections below); an unknown key, or a setting a component does not take, is refused",
    )
    tokenizer: TokenizerSpec = Field(description="which tokenizer encodes the text", json_schema_extra=WEIGHTS)
    context_length: int = Field(
        gt=0, strict=True, description="the most tokens the network attends over", json_schema_extra=WEIGHTS
    )
    recipe: Recipe | None = Field(
        None,
        description="how the weights were made; absent from an imported card (`imported`), whose weights were "
        "trained elsewhere by a recipe the zoo never saw (any other card without one gets the defaults)",
        json_schema_extra=WEIGHTS,
    )
    checkpoint: CheckpointRef = Field(description="the weights file")
    parameters: int | None = Field(
        None,
        ge=0,
        description="trainable parameters, counted by `zoo train`; for an adapter variant, the adapter's own "
        "(those its file holds; the base's card counts the base's)",
        json_schema_extra=WEIGHTS,
    )
    metrics: Metrics = Field(
        default_factory=Metrics,
        description="measured by `zoo train` (never claimed by hand)",
        json_schema_extra=WEIGHTS,
    )
    adapter: AdapterSpec | None = Field(
        None,
        description="set for an adapter variant (e.g. `zoo train NEW --from BASE --trainer lora`): the checkpoint "
        "holds only the adapter, which loading applies to the base's verified weights",
        json_schema_extra=WEIGHTS,
    )
    trained_with: TrainedWith | None = Field(
        None, description="device, dtype, number of processes, torch, threads and CPU `zoo train` used"
    )
    chat: ChatSpec | None = Field(
        None, description="its chat template; a variant without one refuses `zoo chat` and /v1/chat/completions"
    )
    lineage: str = Field(description="the document this variant reproduces")
    license: str = Field(description="the weights' license; required: a card never gets one by default")
    tags: list[str] = Field(default_factory=list, description="free labels, e.g. 'seed-000'")
    origin: Origin | None = Field(
        None, description="set by `zoo install`: the archive (and remote) the variant was installed from"
    )
    components: dict[str, ComponentSource] | None = Field(
        None,
        description="which plugin provided each component the card names (model, tokenizer, positions, block, "
        "trainer, adapter), recorded by `zoo train` and `zoo import`; describes, never defines, the weights",
    )
    allow_external_paths: bool = Field(
        False,
        description="let checkpoint, tokenizer and data paths leave the registry's folder (absolute, '..', "
        "symlinks out); honoured only in the user's own catalogues, never in a plugin's",
    )
    imported: ImportRecord | None = Field(
        None,
        description="set by `zoo import`: the source file, its sha256 and format; such a card has no recipe "
        "unless the source recorded one (nanoGPT's)",
        json_schema_extra=WEIGHTS,
    )

    @model_validator(mode="before")
    @classmethod
    def _recipe_unless_imported(cls, data: Any) -> Any:
        # A hand-written table without a recipe trains with the defaults, as always;
        # an imported card without one was trained elsewhere and says nothing of how.
        if isinstance(data, dict) and data.get("recipe") is None and data.get("imported") is None:
            data = {**data, "recipe": Recipe()}
        return data

    @field_validator("components")
    @classmethod
    def _known_roles(cls, components: dict[str, ComponentSource] | None) -> dict[str, ComponentSource] | None:
        unknown = sorted(set(components or {}) - set(COMPONENT_ROLES))
        if unknown:
            raise ValueError(f"unknown component role(s) {unknown}; roles are {', '.join(COMPONENT_ROLES)}")
        return components

    @field_validator("config")
    @classmethod
    def _current_names(cls, config: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        model = config_model(info.data.get("architecture"))
        return current_setting_names(config, getattr(model, "renamed_settings", {}))

    @model_serializer(mode="wrap")
    def _opt_in_only_when_set(self, handler):
        # The opt-in is written only where a user set it: every other card (and
        # every checkpoint header) reads as it did before the field existed.
        data = handler(self)
        if not self.allow_external_paths:
            data.pop("allow_external_paths", None)
        return data

    @model_validator(mode="after")
    def _context_in_config(self) -> "ModelCard":
        # The architecture reads its window from config; the card states it once.
        declared = self.config.get("context_length")
        if declared is not None and declared != self.context_length:
            raise ValueError(f"config.context_length={declared} disagrees with context_length={self.context_length}")
        if self.recipe is not None and self.recipe.context is not None and self.recipe.context > self.context_length:
            raise ValueError(
                f"recipe.context={self.recipe.context} is longer than the model reads (context_length={self.context_length})"
            )
        return self

    @model_validator(mode="after")
    def _config_fits_the_architecture(self) -> "ModelCard":
        # Before anything could be built from it; the table itself stays as written.
        model = config_model(self.architecture)
        if model is not None:
            try:
                model.model_validate(self.architecture_config())
            except ValidationError as exc:
                raise _config_problem(exc) from None
        return self

    @model_validator(mode="after")
    def _adapter_agrees_with_recipe(self) -> "ModelCard":
        # One base, stated once per section: a recipe naming another would make the card say two things.
        adapter, recipe = self.adapter, self.recipe
        if adapter is None or recipe is None:
            return self
        if adapter.base == self.name:
            raise ValueError(f"adapter.base: an adapter cannot apply to its own variant '{self.name}'")
        for key in ("base", "base_sha256"):
            if getattr(recipe, key) is not None and getattr(recipe, key) != getattr(adapter, key):
                raise ValueError(f"adapter.{key} disagrees with recipe.{key}")
        return self

    def training_recipe(self) -> Recipe:
        """The recipe that made these weights; for weights trained elsewhere (an
        imported card has none), one line saying so and what to do instead."""
        if self.recipe is None:
            raise ZooError(
                f"'{self.name}' was trained elsewhere and imported: the zoo has no recipe to train it again; "
                f"fine-tune it instead with `zoo train NEW --from {self.name}`"
            )
        return self.recipe

    @property
    def evaluation_data(self) -> str:
        """The text `zoo eval` scores on by default: the recipe's, or for weights
        trained elsewhere the dataset their source names, else the zoo's standard text."""
        if self.recipe is not None:
            return self.recipe.data
        return (self.imported.dataset if self.imported is not None else None) or EVALUATION_DATASET

    @property
    def train_fraction(self) -> float:
        """The text's leading share that is not validation: the recipe's, or the usual nine tenths."""
        return self.recipe.train_fraction if self.recipe is not None else EVALUATION_TRAIN_FRACTION

    @property
    def skips_unknown(self) -> bool:
        """Whether the text is scored without the characters the vocabulary lacks (as it was trained)."""
        return bool(self.recipe is not None and self.recipe.skip_unknown)

    def architecture_config(self) -> dict[str, Any]:
        """The keyword arguments an architecture factory receives."""
        return {
            **self.config,
            "context_length": self.context_length,
            "vocab_size": self.tokenizer.vocab_size,
        }

    def weight_fields(self) -> dict[str, Any]:
        """The fields marked ``WEIGHTS``, for comparing a checkpoint's card with
        the registry's. Descriptive fields (description, lineage, license, tags,
        the recipe's notes) and locations (checkpoint, tokenizer file, the
        dataset's name or path) may be edited without retraining. Checksums of
        the tokenizer and the text are compared by the caller when both cards
        record them: older checkpoints predate those fields."""
        return _marked(self, self.model_dump(mode="json", exclude_none=True))

    def header_json(self) -> dict[str, Any]:
        """The card as stored in a safetensors header: without its own checksum,
        which cannot be known before the file is written."""
        data = self.model_dump(mode="json", exclude_none=True)
        data["checkpoint"].pop("sha256", None)
        data.pop("allow_external_paths", None)  # where files may live, not what the weights are
        data.pop("origin", None)  # where this copy came from: the same weights may arrive many ways
        # Which plugin versions built it: not what the weights are, and a header
        # without it keeps reading exactly as checkpoints written before the field.
        data.pop("components", None)
        return data

    def index_entry(self) -> dict[str, Any]:
        """The card as JSON, as a registry table holds it (`zoo show --json`
        prints it): what the catalogue's front (`zoo list`, `search`, `show`,
        completion) reads from the card cache without importing pydantic
        (``Variant.index``). Fields that are unset (None) are absent."""
        return self.model_dump(mode="json", exclude_none=True)


def defines_weights(field: FieldInfo) -> bool:
    """Whether ``field`` is marked ``WEIGHTS`` (a callable json_schema_extra never is)."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and extra.get("defines_weights") is True


def _marked(model: BaseModel, dumped: dict[str, Any]) -> dict[str, Any]:
    """``dumped`` (``model`` as JSON) cut to its ``WEIGHTS`` fields; a nested card
    section with marked fields of its own is cut the same way."""
    kept = {}
    for key, field in type(model).model_fields.items():
        if key not in dumped or not defines_weights(field):
            continue
        value = getattr(model, key)
        nested = isinstance(value, BaseModel) and any(defines_weights(f) for f in type(value).model_fields.values())
        kept[key] = _marked(value, dumped[key]) if nested else dumped[key]
    return kept


_ABSENT = object()


def first_difference(a: Any, b: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """The first field (a dotted path) at which two JSON-like values differ, with
    both values there (``None`` when they are equal); a field only one side has
    is reported with ``"(absent)"`` on the other."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            found = first_difference(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{where}.{key}" if where else key)
            if found:
                return found
        return None
    if a == b and isinstance(a, bool) == isinstance(b, bool):  # 1 == 1.0, but True is not 1
        return None

    def shown(value):
        return "(absent)" if value is _ABSENT else value

    return where or "(card)", shown(a), shown(b)
