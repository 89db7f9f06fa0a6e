"""The catalogue of variants: registry TOML files, validated into cards.

Each plugin that ships variants contributes one TOML file (the built-in one is
the project's `registry.toml`); every table in it is one variant, its key the
variant's name. Paths inside a card are relative to the file that holds it, so a
plugin package can carry its checkpoints beside its registry.

Reading a registry needs tomllib and pydantic the first time only: the validated
cards are cached (`zoo_core.catalogue.card_cache`), and the catalogue's front
(`zoo list`, `search`, `show`, completion) reads each card's index entry, JSON,
without importing pydantic. Neither imports torch.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import UnknownName, ZooError, did_you_mean
from ..storage.files import atomic_write_text, describe_os_error, read_limited
from ..storage.toml_text import render_toml
from .card_cache import CachedCard, cache_cards, cached_cards
from .paths import check_external_paths, resolve_inside

if TYPE_CHECKING:
    from .cards import ModelCard


class Variant:
    """A card together with where it came from.

    ``card`` is the validated pydantic ``ModelCard``: what everything behind the
    catalogue's front (load, sample, train, ...) reads. ``index`` is the same
    card as JSON (``ModelCard.index_entry``): what the front (`zoo list`,
    `search`, `show`, completion) reads, so that it never imports pydantic.
    A variant read from the card cache holds its index entry and registry table,
    and validates its card when ``card`` is first used. Edit neither in place: a
    changed card is a new ``Variant(card=...)``.
    """

    __slots__ = ("source", "plugin", "layer", "_card", "_index", "_table")
    source: Path
    plugin: str
    layer: str
    _card: ModelCard | None
    _index: dict[str, Any] | None
    _table: dict[str, Any] | None

    def __init__(
        self,
        card: ModelCard | None,
        source: Path,
        plugin: str,
        layer: str = "built-in",
        *,
        index: dict[str, Any] | None = None,
        table: dict[str, Any] | None = None,
    ):
        if card is None and (index is None or table is None):
            raise TypeError("a Variant needs its card, or the index entry and registry table of a cached one")
        set_ = object.__setattr__  # immutable from outside, as a frozen dataclass
        set_(self, "source", source)  # the registry file that declares it
        set_(self, "plugin", plugin)  # the plugin that contributed that file ("user"/"extra" for the user's own)
        set_(self, "layer", layer)  # see zoo_core.catalogue.layers.LAYERS
        set_(self, "_card", card)
        set_(self, "_index", index)
        set_(self, "_table", table)

    @classmethod
    def cached(cls, cached: CachedCard, source: Path, plugin: str, layer: str = "built-in") -> "Variant":
        return cls(None, source, plugin, layer, index=cached.entry, table=cached.table)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Variant is read-only; cannot set {name!r}")

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        # pickle and copy restore slots through setattr, which is refused above
        for name, value in state[1].items():
            object.__setattr__(self, name, value)

    @property
    def card(self) -> ModelCard:
        card = self._card
        if card is None:
            from .cards import ModelCard  # here: the front reads ``index`` and must not import pydantic

            # The table validated before it was cached, so this cannot fail.
            card = ModelCard.model_validate(self._table)
            object.__setattr__(self, "_card", card)
        return card

    @property
    def index(self) -> dict[str, Any]:
        """The card as plain data, for the front: read it, never edit it."""
        index = self._index
        if index is None:  # then the card was given (see __init__)
            index = self.card.index_entry()
            object.__setattr__(self, "_index", index)
        return index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Variant) and (self.index, self.source, self.plugin, self.layer) == (
            other.index,
            other.source,
            other.plugin,
            other.layer,
        )

    __hash__ = None  # type: ignore[assignment]  # as before: a card is not hashable

    def __repr__(self) -> str:
        return f"Variant(name={self.name!r}, source={self.source!r}, plugin={self.plugin!r}, layer={self.layer!r})"

    @property
    def name(self) -> str:
        return self.index["name"]

    def resolve(self, relative: str, what: str = "path") -> Path:
        """A path the card names, kept inside the registry's folder (see zoo_core.catalogue.paths)."""
        return resolve_inside(
            self.source.parent,
            relative,
            what=f"variant '{self.name}': {what}",
            allow_outside=self.index.get("allow_external_paths", False),
        )

    @property
    def checkpoint_path(self) -> Path:
        return self.resolve(self.index["checkpoint"]["path"], "checkpoint path")

    @property
    def tokenizer_path(self) -> Path | None:
        file = self.index["tokenizer"].get("file")
        return self.resolve(file, "tokenizer path") if file else None


MAX_REGISTRY_BYTES = 64 * 1024 * 1024  # thousands of variants fit in far less


def read_registry_file(path: Path, plugin: str, layer: str = "built-in") -> list[Variant]:
    """Parse and validate one registry file; errors name the file, variant and field.

    A card that sets ``allow_external_paths`` is refused in a plugin's file: only
    catalogues the user writes (user, extra) or ships (built-in) may opt in.
    Cards this file's very bytes validated to before are read from the cache."""
    try:
        data = read_limited(path, MAX_REGISTRY_BYTES, "registry file")
    except FileNotFoundError:
        raise ZooError(f"{path}: registry file not found") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read registry: {describe_os_error(exc)}") from None
    source = path.resolve()
    cached = cached_cards(path, data)
    if cached is not None:
        for card in cached:
            check_external_paths(path, card.entry["name"], card.entry.get("allow_external_paths", False), plugin, layer)
        return [Variant.cached(card, source, plugin, layer) for card in cached]
    validated = _validate_registry(path, data, plugin, layer)
    variants = [Variant(card, source, plugin, layer, index=card.index_entry()) for _, card in validated]
    cache_cards(path, data, [CachedCard(table, variant.index) for (table, _), variant in zip(validated, variants)])
    return variants


def _validate_registry(path: Path, data: bytes, plugin: str, layer: str) -> list[tuple[dict[str, Any], ModelCard]]:
    """Each table of the file (its name included) and the card it validates to."""
    # Behind the front: pydantic and tomllib, paid only when the card cache misses.
    from .card_validation import validate_registry

    return validate_registry(path, data, plugin, layer)


class Catalogue:
    """All variants every plugin contributed, by name."""

    def __init__(self, variants: Iterable[Variant] = ()):
        self._variants: dict[str, Variant] = {}
        self.problems: list[str] = []  # declarations refused (a name already taken by an earlier layer)
        # Names declared in two layers, with the line naming both files: resolving
        # one is refused, since neither declaration is surely the one meant.
        self._declared_twice: dict[str, str] = {}
        for variant in variants:
            self.add(variant)

    def add(self, variant: Variant) -> None:
        existing = self._variants.get(variant.name)
        if existing is not None:
            raise ZooError(
                f"variant '{variant.name}' is declared twice: by plugin '{existing.plugin}' "
                f"({existing.source}) and by plugin '{variant.plugin}' ({variant.source})"
            )
        self._variants[variant.name] = variant

    def add_or_refuse(self, variant: Variant) -> None:
        """Add a user's variant; one whose name is taken is refused and reported,
        naming both files, while the rest of its file is kept."""
        existing = self._variants.get(variant.name)
        if existing is None:
            self._variants[variant.name] = variant
            return
        clash = (
            f"variant '{variant.name}' is declared twice: in the {existing.layer} catalogue ({existing.source}) "
            f"and in the {variant.layer} catalogue ({variant.source})"
        )
        self.problems.append(f"{clash}; the second is ignored until one is renamed or removed")
        self._declared_twice.setdefault(variant.name, f"{clash}; rename or remove one")

    def add_all(self, variants: list[Variant]) -> None:
        """Add one registry file's variants: all of them, or (on a clash) none."""
        for variant in variants:
            if variant.name in self._variants:
                self.add(variant)  # raises, naming both files
        for variant in variants:
            self.add(variant)

    def __iter__(self):
        return iter(self._variants.values())

    def __len__(self) -> int:
        return len(self._variants)

    def names(self) -> list[str]:
        return list(self._variants)

    def find(self, name: str) -> Variant | None:
        return self._variants.get(name)

    def get(self, name: str) -> Variant:
        """The variant ``name`` resolves to; a name declared in two layers is refused, naming both files."""
        if name in self._declared_twice:
            raise ZooError(self._declared_twice[name])
        try:
            return self._variants[name]
        except KeyError:
            hint = did_you_mean(name, self._variants) or "; see `zoo list`"
            raise UnknownName(f"unknown variant '{name}'{hint}") from None

    def match(self, pattern: str | None = None) -> list[Variant]:
        """Variants whose name matches a shell-style wildcard (all when None)."""
        if not pattern:
            return list(self)
        return [v for v in self if fnmatch.fnmatchcase(v.name, pattern)]


# --- writing -------------------------------------------------------------------


def render_registry(cards: Iterable[ModelCard], preamble: str = "") -> str:
    """TOML text for cards, one table per variant, in the order given."""
    return render_index_entries([card.index_entry() for card in cards], preamble)


def render_index_entries(entries: Iterable[dict[str, Any]], preamble: str = "") -> str:
    """TOML text for cards as JSON (``ModelCard.index_entry``, ``Variant.index``):
    `zoo show` renders a card without pydantic."""
    document = {}
    for entry in entries:
        data = dict(entry)
        document[data.pop("name")] = data
    return render_toml(document, preamble)


def upsert_registry_entry(path: Path, card: ModelCard) -> None:
    """Replace (or append) ``card`` in the registry file at ``path``, keeping the
    other variants, their order and the file's leading comment. Callers hold the
    file's lock; the write itself is atomic."""
    preamble, cards = "", []
    if path.exists():
        text = path.read_text(encoding="utf-8-sig")
        comment = []
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            comment.append(line[1:].removeprefix(" "))
        preamble = "\n".join(comment)
        cards = [variant.card for variant in read_registry_file(path, plugin="-")]
    names = [c.name for c in cards]
    if card.name in names:
        cards[names.index(card.name)] = card
    else:
        cards.append(card)
    atomic_write_text(path, render_registry(cards, preamble))
