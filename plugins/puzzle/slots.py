"""The puzzle's vocabulary and the named slots of its residual stream (seed 003).

Every number the hand-built network reads or writes lives in a named slot of
the residual stream, laid out as in the seed:

     0..8   token features: what a word is (its object abilities, which action
            it is and whether it swaps, question, disobey)
     9..14  pos0..pos5: the one-hot position of the token
    15..21  what the heads write: previous_word_is_disobey (layer 1, previous-word
            head), the object's attributes (layer 1, object head), and for each
            attribute whether its action swaps and whether it was disobeyed
            (layer 2, flight and speech heads)

Without positions (the `puzzle-disobeys-nopos` variant) the six position slots
are simply absent; every other slot keeps its name, so the construction that
refers to slots by name is unchanged.
"""

from __future__ import annotations

# What each word *is*, as the token-feature slots it switches on. This is the
# seed's `token_to_vector` table with its columns named; the order of this
# dict is the tokenizer's id order.
TOKEN_FEATURES: dict[str, tuple[str, ...]] = {
    "Rock": ("object",),
    "Human": ("object", "speak"),
    "Crow": ("object", "fly"),
    "Flying superhero": ("object", "fly", "speak"),
    "swap-flight": ("action_fly", "swap_fly"),
    "swap-speech": ("action_speak", "swap_speak"),
    "keep-flight": ("action_fly",),
    "keep-speech": ("action_speak",),
    "disobeys": ("disobey",),
    "he-is?": ("question",),
}

VOCABULARY: tuple[str, ...] = tuple(TOKEN_FEATURES)
QUESTION = "he-is?"
DISOBEYS = "disobeys"

TOKEN_FEATURE_SLOTS: tuple[str, ...] = (
    "fly",
    "speak",
    "swap_fly",
    "swap_speak",
    "object",
    "action_fly",
    "action_speak",
    "question",
    "disobey",
)

# Written by the heads; the names say what the slot holds at the question token.
HEAD_OUTPUT_SLOTS: tuple[str, ...] = (
    "previous_word_is_disobey",  # layer 1, previous-word head (at each action word)
    "object_attribute_fly",  # layer 1, object head
    "object_attribute_speak",  # layer 1, object head
    "is_swap_attr_fly",  # layer 2, flight head
    "is_attr_fly_disobeyed",  # layer 2, flight head
    "is_swap_attr_speak",  # layer 2, speech head
    "is_attr_speak_disobeyed",  # layer 2, speech head
)

# The readout of seed 003 (kept from the previous notebook): a word for each
# (flies, middle attribute, speaks). The network never sets the middle
# attribute, so only the four words with a 0 there can be answers.
ATTRIBUTES_TO_WORD: dict[tuple[int, int, int], str] = {
    (0, 0, 0): "Rock",
    (0, 0, 1): "Human",
    (0, 1, 0): "Car",
    (0, 1, 1): "Talking Tow Truck",
    (1, 0, 0): "Crow",
    (1, 0, 1): "Flying Superhero",
    (1, 1, 0): "Plane",
    (1, 1, 1): "Talking Planes",
}


def position_slot(position: int) -> str:
    return f"pos{position}"


def slot_names(positions: bool = True, max_tokens: int = 6) -> list[str]:
    """The residual stream's slots, in order: 22 with positions (max_tokens=6), 16 without."""
    position_slots = [position_slot(p) for p in range(max_tokens)] if positions else []
    return [*TOKEN_FEATURE_SLOTS, *position_slots, *HEAD_OUTPUT_SLOTS]


class SlotLayout:
    """Slot names <-> indices of the residual stream: ``layout["question"]`` is 7."""

    def __init__(self, names: list[str]):
        if len(set(names)) != len(names):
            raise ValueError("slot names must be distinct")
        self.names = list(names)
        self._index = {name: i for i, name in enumerate(self.names)}

    def __getitem__(self, name: str) -> int:
        return self._index[name]

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def __len__(self) -> int:
        return len(self.names)

    @property
    def width(self) -> int:
        return len(self.names)
