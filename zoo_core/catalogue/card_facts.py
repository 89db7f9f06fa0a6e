"""A validated card as plain, read-only data: what `zoo list` and `zoo load` read.

`zoo_core.catalogue.cards` defines cards as pydantic models, and importing pydantic (and
defining the models) costs more than everything else `zoo list` does, and more
than `zoo load` spends outside torch. A card validated once is cached as JSON
(`zoo_core.catalogue.card_cache`); a ``CardFacts`` gives attribute access to that data
(``facts.tokenizer.kind``, ``facts.metrics.validation_loss``, ``facts.config``
as a dict), the same values the pydantic card holds, without importing pydantic.

Nothing here imports pydantic: the cards are read through ``model_fields`` on
models another module already built.
"""

from __future__ import annotations

from typing import Any

_ABSENT = object()


def _copied(value: Any) -> Any:
    """A fresh copy of JSON data: a caller editing what it was handed must not
    edit the facts every other caller reads."""
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copied(item) for item in value]
    return value


class Facts:
    """Attribute access to one section of a card (the card itself, its tokenizer,
    recipe, metrics, ...): read-only, lists and dicts handed out as copies."""

    __slots__ = ("_data", "_sections", "_where")

    def __init__(self, data: dict[str, Any], sections: frozenset[str], where: str = ""):
        object.__setattr__(self, "_data", data)
        object.__setattr__(self, "_sections", sections)  # dotted paths of the fields that are card sections
        object.__setattr__(self, "_where", where)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._data:
            raise AttributeError(
                f"card {'section ' + repr(self._where) + ' ' if self._where else ''}has no field {name!r}"
            )
        value = self._data[name]
        path = f"{self._where}.{name}" if self._where else name
        if value is not None and path in self._sections:
            return Facts(value, self._sections, path)
        return _copied(value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("card facts are read-only; make a new card with ModelCard.model_copy(update=...)")

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        # pickle and copy restore slots through setattr, which is refused above
        for name, value in state[1].items():
            object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Facts) and (self._where, self._data) == (other._where, other._data)

    __hash__ = None  # type: ignore[assignment]  # mutable data inside, like the pydantic card

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"

    def as_dict(self) -> dict[str, Any]:
        """Every field of the section, None included, as a fresh dict."""
        return _copied(self._data)


class CardFacts(Facts):
    """The whole card, and what the fast paths compute from it."""

    __slots__ = ("_weight_fields",)

    def __init__(self, data: dict[str, Any], sections: frozenset[str], weight_fields: dict[str, Any]):
        super().__init__(data, sections)
        object.__setattr__(self, "_weight_fields", weight_fields)

    def architecture_config(self) -> dict[str, Any]:
        """The keyword arguments an architecture factory receives (as
        ``ModelCard.architecture_config``)."""
        return {
            **self.config,
            "context_length": self._data["context_length"],
            "vocab_size": self._data["tokenizer"]["vocab_size"],
        }

    def weight_fields(self) -> dict[str, Any]:
        """``ModelCard.weight_fields()``, computed when the card was validated."""
        return _copied(self._weight_fields)

    def to_json(self) -> dict[str, Any]:
        """What `zoo_core.catalogue.card_cache` stores for this card."""
        return {"fields": self._data, "sections": sorted(self._sections), "weight_fields": self._weight_fields}

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> "CardFacts":
        return cls(stored["fields"], frozenset(stored["sections"]), stored["weight_fields"])

    @classmethod
    def of(cls, card: Any) -> "CardFacts":
        """The facts of a validated ``ModelCard``: every field's value as the model
        holds it (defaults filled in, None kept), sections as nested dicts."""
        sections: set[str] = set()
        return cls(_fields(card, "", sections), frozenset(sections), card.weight_fields())


def _fields(model: Any, where: str, sections: set[str]) -> dict[str, Any]:
    data = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        path = f"{where}.{name}" if where else name
        if hasattr(type(value), "model_fields"):  # a nested card section (a pydantic model)
            sections.add(path)
            value = _fields(value, path, sections)
        elif isinstance(value, dict) and any(hasattr(type(item), "model_fields") for item in value.values()):
            # A table of small sections (`components`): plain dicts, as JSON would read them back.
            value = {key: item.model_dump(mode="json") for key, item in value.items()}
        data[name] = _copied(value)
    return data


def is_plain_json(value: Any) -> bool:
    """Only what JSON carries unchanged (TOML dates and times do not): such data
    can be cached and read back as the very same values."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, list):
        return all(is_plain_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and is_plain_json(item) for key, item in value.items())
    return False


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
