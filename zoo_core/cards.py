"""Model cards: what a variant is, how it was made and how well it does.

A card is validated from one `registry.toml` table and written, as JSON, into the
header of the variant's safetensors file, so a checkpoint describes itself.
Unknown fields are errors everywhere: a typo must not silently become a default.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class TokenizerSpec(_Strict):
    """Which registered tokenizer encodes this variant's text, and its data file."""

    kind: str = Field(description="registered tokenizer name, e.g. 'bpe'")
    vocab_size: int = Field(gt=0)
    file: str | None = Field(None, description="path relative to the registry file")


class Recipe(_Strict):
    """How the weights came to be: a training run, or set by hand."""

    kind: Literal["trained", "hand-built"] = "trained"
    optimizer: Literal["adamw", "sgd"] = "adamw"
    learning_rate: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.999, ge=0, lt=1)
    grad_clip: float | None = Field(None, gt=0, description="clip the gradient norm to this value")
    lr_schedule: Literal["constant", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    min_learning_rate: float = Field(0.0, ge=0)
    steps: int = Field(1, gt=0)
    batch_size: int = Field(32, gt=0)
    seed: int = 42
    eval_every: int = Field(500, gt=0)
    eval_windows: int = Field(320, gt=0, description="fixed windows per split for train/val loss")
    data: str = Field("data/tinyshakespeare.txt", description="corpus, relative to the registry")
    train_fraction: float = Field(0.9, gt=0, lt=1)
    notes: str = ""

    @model_serializer(mode="wrap")
    def _only_what_applies(self, handler):
        # Hand-set weights have no optimizer, steps or data: writing the defaults
        # out would describe a training run that never happened.
        data = handler(self)
        if self.kind == "hand-built":
            return {key: data[key] for key in ("kind", "notes")}
        return data


class Metrics(_Strict):
    """Measured, never claimed: filled in by `zoo train` (or `zoo eval`)."""

    train_loss: float | None = None
    validation_loss: float | None = None
    validation_perplexity: float | None = Field(None, description="exp(validation_loss)")
    uniform_loss: float | None = Field(None, description="ln(vocabulary size): what guessing uniformly scores")
    loss_unit: str = "nats per token"
    validation_bits_per_byte: float | None = Field(
        None, description="bits per UTF-8 byte of the whole validation text: compares across tokenizers (zoo_core.bits)")
    validation_bits_per_character: float | None = Field(None, description="the same bits per character")
    training_seconds: float | None = None
    tokens_per_second: float | None = None
    accuracy: float | None = None


class CheckpointRef(_Strict):
    path: str = Field(description="safetensors file, relative to the registry file")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")


class ModelCard(_Strict):
    """Everything the zoo knows about one variant."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    description: str
    architecture: str = Field(description="registered model name, e.g. 'transformer'")
    config: dict[str, Any] = Field(default_factory=dict, description="the architecture's settings")
    tokenizer: TokenizerSpec
    context_length: int = Field(gt=0)
    recipe: Recipe = Field(default_factory=Recipe)
    checkpoint: CheckpointRef
    parameters: int | None = Field(None, ge=0)
    metrics: Metrics = Field(default_factory=Metrics)
    lineage: str = Field(description="the document this variant reproduces")
    license: str = "MIT"
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _context_in_config(self) -> "ModelCard":
        # The architecture reads its window from config; the card states it once.
        declared = self.config.get("context_length")
        if declared is not None and declared != self.context_length:
            raise ValueError(
                f"config.context_length={declared} disagrees with context_length={self.context_length}"
            )
        return self

    def architecture_config(self) -> dict[str, Any]:
        """The keyword arguments an architecture factory receives."""
        return {
            **self.config,
            "context_length": self.context_length,
            "vocab_size": self.tokenizer.vocab_size,
        }

    def header_json(self) -> dict[str, Any]:
        """The card as stored in a safetensors header: without its own checksum,
        which cannot be known before the file is written."""
        data = self.model_dump(mode="json", exclude_none=True)
        data["checkpoint"].pop("sha256", None)
        return data

    def header_json_for_comparison(self) -> dict[str, Any]:
        """``header_json`` without the metrics `zoo eval --record` adds after the
        weights were written: measuring a checkpoint again must not make it
        disagree with its own header."""
        data = self.header_json()
        for key in MEASURED_LATER:
            data.get("metrics", {}).pop(key, None)
        return data


# Metrics `zoo eval --record` writes into a registry after training.
MEASURED_LATER = ("validation_bits_per_byte", "validation_bits_per_character")


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
