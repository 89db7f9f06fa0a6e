"""Finding variants: `zoo list` filters and sorts, `zoo search` looks through text.

Index entries only (`Variant.index`, plain data): no torch and no pydantic, so
both stay as fast as listing.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Iterable

from ..errors import ZooError
from .evaluation_text import EVALUATION_DATASET
from .registry import Variant

SORT_KEYS = ("name", "validation_loss", "parameters")
_WILDCARDS = set("*?[")


def name_matches(name: str, pattern: str) -> bool:
    """Shell wildcards when the pattern has any (``transformer-*``), else a
    case-insensitive substring (``rope`` finds ``gpt-char-mini-rope``)."""
    if _WILDCARDS & set(pattern):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern.lower() in name.lower()


def dataset_of(variant: Variant) -> str | None:
    """The data a variant was trained on, as its recipe records it: the standard
    trainer's, or any other trainer's (lora, a plugin's) that read a text and
    recorded its sha256. None for hand-set weights and trainers that read no text."""
    recipe = variant.index.get("recipe")
    if recipe is None:  # trained elsewhere: the zoo does not know on what
        return None
    read_text = recipe["kind"] == "trained" or recipe.get("data_sha256") is not None
    return recipe["data"] if recipe["kind"] != "hand-built" and read_text else None


def validation_data_of(variant: Variant) -> str | None:
    """The text a variant's validation figures are measured on, as `zoo list` labels
    them: its training text's held-out part (the recipe's dataset, a file by its
    name), or for weights trained elsewhere the text `zoo eval` scores them on."""
    index = variant.index
    if index.get("recipe") is None:
        imported = index.get("imported") or {}
        return imported.get("dataset") or EVALUATION_DATASET
    data = dataset_of(variant)
    return PurePath(data).name if data is not None else None


def _dataset_matches(variant: Variant, wanted: str) -> bool:
    data = dataset_of(variant)
    if data is None:
        return False
    path = PurePath(data)
    return wanted in (data, path.name, path.stem)


@dataclass
class VariantFilter:
    """What `zoo list` narrows by; every given criterion must hold."""

    pattern: str | None = None
    tags: list[str] = field(default_factory=list)
    architecture: str | None = None
    tokenizer: str | None = None
    dataset: str | None = None

    def accepts(self, variant: Variant) -> bool:
        card = variant.index
        return (
            (not self.pattern or name_matches(card["name"], self.pattern))
            and all(tag in card["tags"] for tag in self.tags)
            and (self.architecture is None or card["architecture"] == self.architecture)
            and (self.tokenizer is None or card["tokenizer"]["kind"] == self.tokenizer)
            and (self.dataset is None or _dataset_matches(variant, self.dataset))
        )


def sort_variants(variants: list[Variant], key: str | None) -> list[Variant]:
    """Catalogue order, or by ``key``; variants without the value go last."""
    if key is None:
        return variants
    if key not in SORT_KEYS:
        raise ZooError(f"cannot sort by '{key}'; choose one of {', '.join(SORT_KEYS)}")
    if key == "name":
        return sorted(variants, key=lambda v: v.name)

    def value(variant: Variant) -> float:
        card = variant.index
        number = card["metrics"].get("validation_loss") if key == "validation_loss" else card.get("parameters")
        return math.inf if number is None else number

    return sorted(variants, key=value)


def find_variants(variants: Iterable[Variant], criteria: VariantFilter, sort: str | None = None) -> list[Variant]:
    return sort_variants([v for v in variants if criteria.accepts(v)], sort)


_WORD = re.compile(r"[a-z0-9]+")
_NEGATIONS = {"no": "no", "without": "no", "non": "no"}


def words(text: str) -> list[str]:
    """``text`` as search words: lower-case runs of letters and digits, a plural's
    final s dropped (``positions`` finds ``position``), ``without`` read as ``no``.
    Whole words only: ``no`` must not find ``pre-norm``."""
    found = []
    for word in _WORD.findall(text.lower()):
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        found.append(_NEGATIONS.get(word, word))
    return found


def card_words(variant: Variant) -> list[str]:
    """What search looks through, in order: name, description, tags, architecture,
    then the components the card's config names (``positions = "none"`` reads
    ``positions none no positions``, the way a person asks for it)."""
    card = variant.index
    text = [card["name"], card["description"], *card["tags"], card["architecture"]]
    for key, value in (card["config"] or {}).items():
        if isinstance(value, str) or value is False:
            text.append(f"{key} {value}" + (f" no {key}" if value in ("none", False) else ""))
    return [word for part in text for word in [*words(part), "|"]]  # "|": a phrase never spans two fields


def _terms(wanted: list[str]) -> list[list[str]]:
    """The query's words, a negation bound to the word after it: ``no positions``
    asks for cards saying *no position*, not for cards holding both words apart
    (``no dropout`` beside ``positions learned``)."""
    terms: list[list[str]] = []
    for word in wanted:
        if terms and terms[-1] == ["no"]:
            terms[-1].append(word)
        else:
            terms.append([word])
    return terms


def _holds(haystack: list[str], phrase: list[str]) -> bool:
    return any(haystack[i : i + len(phrase)] == phrase for i in range(len(haystack) - len(phrase) + 1))


def search_variants(variants: Iterable[Variant], text: str) -> list[Variant]:
    """Variants whose name, description, tags or components hold every word of
    ``text`` (whole words, case-insensitive); those holding the words as one
    phrase first, then those that match in the name."""
    wanted = words(text)
    if not wanted:
        raise ZooError("the search text is empty; give a word to look for, e.g. `zoo search rope`")
    terms = _terms(wanted)
    found: list[tuple[bool, int, int, Variant]] = []
    for variant in variants:
        haystack = card_words(variant)
        if all(_holds(haystack, term) for term in terms):
            in_name = sum(word in words(variant.name) for word in wanted)
            found.append((not _holds(haystack, wanted), -in_name, len(found), variant))
    return [variant for *_, variant in sorted(found, key=lambda item: item[:3])]
